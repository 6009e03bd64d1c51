-- unique.lua: enqueue's dedup keys (docs/deduplication.md). A job enqueued with a dedup key
-- holds the key's index entry, `<root>unique:<key>` -> its id, and records how it was enqueued
-- in its field uq: "<mode> <window ms> <key>", the enqueue argument as it came. A later enqueue
-- with the same key is answered with that job while the job still holds the key for the later
-- call's mode (unique_holder); otherwise the new job goes in and takes the key over.
--
-- Modes, each window counted in ms and its end exclusive (the job holds the key while
-- now < start + window):
--   waiting   while the job waits (Waiting or RetryWaiting)            window 0
--   running   while it waits or runs (also Leased)                     window 0
--   finished  while it waits or runs, and for the window after it finished (finished_at)
--   throttle  for the window after the job's first enqueue (inserted_at), whatever its state
--   debounce  for the window after its first enqueue, while it is Waiting and was never
--             attempted: the later enqueue replaces its payload and available_at instead
-- One lookup a job with a key (GET, then the holder's HGETALL); nothing for a job without.

-- uses: core, checks, job, events
local fmt, invalid, key_job, refuse = Core.fmt, Core.invalid, Core.key_job, Core.refuse
local TERMINAL = Core.TERMINAL
local id_error, time_error, writes_error = Checks.id_error, Checks.time_error, Checks.writes_error
local blocked, load_job, move = Job.blocked, Job.load_job, Job.move
local status_name, PAYLOAD_CHUNKS = Job.status_name, Job.PAYLOAD_CHUNKS
local emit = Events.emit

-- Whether each mode takes a window (a positive one) or none ("0").
local WINDOWED = {waiting = false, running = false, finished = true, throttle = true,
  debounce = true}

local function key_unique(ctx, key) return ctx.prefix .. "unique:" .. key end

-- The enqueue argument "<mode> <window ms> <key>" read into a.u = {mode, window, key}, or a
-- refusal (InvalidJob). The key follows the rule of job ids (docs/lifecycle.md, "Job ids").
local function unique_arg(a)
  local mode, ms, key = string.match(a.dedup, "^(%l+) (%-?%d+) (.*)$")
  local windowed = mode and WINDOWED[mode]
  if windowed == nil then
    return invalid("dedup must be '<mode> <window ms> <key>', mode one of waiting, running, "
      .. "finished, throttle, debounce")
  end
  local bad = id_error(key, "dedup key")
  if bad then return bad end
  local window = tonumber(ms)
  if windowed and window < 1 then return invalid(mode .. " window must be positive") end
  if not windowed and window ~= 0 then return invalid(mode .. " takes no window") end
  if time_error(window, "") then -- (a window as long as the times we keep: plenty)
    return invalid(mode .. " window must be at most 17592186044415 ms")
  end
  a.u = {mode = mode, window = window, key = key}
  return nil
end

-- Whether job h still holds its key for a new job of dedup u at now.
local function holds(h, u, now)
  local mode, st = u.mode, h.st
  if mode == "waiting" then return st == "W" or st == "R" end
  if mode == "running" then return not TERMINAL[st] end
  if mode == "finished" then return not TERMINAL[st] or now < tonumber(h.fin) + u.window end
  if mode == "throttle" then return now < tonumber(h.ins) + u.window end
  return st == "W" and h.a == "0" and now < tonumber(h.ins) + u.window -- debounce
end

-- The job that answers new job `a` (a.held: its id; a.held_h: its fields, when it exists
-- before this call; a.debounce: a debounce rewrites it), or nil when `a` goes in. taken: key -> id of the jobs this call enqueues
-- before `a` (the first of a batch holds a key for the rest of it). A refusal (CorruptKey,
-- CorruptJob) when the index entry or its job is not ours to read; for a debounce, the
-- refusal of the holder's index keys (writes: enqueue.lua's WRITES).
local function unique_holder(ctx, a, now, taken, writes)
  local u = a.u
  if taken[u.key] then
    a.held = taken[u.key]
    return nil
  end
  local k = key_unique(ctx, u.key)
  local id = redis.pcall("GET", k)
  if type(id) == "table" then return refuse("CorruptKey", k, "not a string") end
  if not id then return nil end
  local h, err = load_job(ctx, id)
  if h == nil then
    if err[1] == "MissingJob" then return nil end -- (a job deleted by hand: the key is free)
    return err
  end
  if not holds(h, u, now) then return nil end
  a.held, a.held_h = id, h
  if u.mode == "debounce" then
    a.debounce = true
    local index = blocked(h) and "blocked" or (a.at <= now and "ready" or "delayed")
    return writes_error(ctx, h.q, writes[index])
  end
  return nil
end

-- New job `a` takes its key (written with the job: see enqueue.lua write_one).
local function unique_take(ctx, a)
  redis.call("SET", key_unique(ctx, a.u.key), a.id)
end

-- The job a debounced enqueue `a` replaces (a.held_h: as this call left it, enqueue.lua's
-- held_job): its payload and available_at become a's, its id, attempts and the rest stay; it
-- goes back to its index and an event says its status. Every chunk a payload may take is
-- dropped, not only those a.held_h names: a job of the same call before `a` (a supersede) may
-- have written more. Returns the job as it is now (loaded again: the old chunks are gone).
local function debounce(ctx, a, now)
  local id, h = a.held, a.held_h
  redis.call("HDEL", key_job(ctx, id), unpack(PAYLOAD_CHUNKS))
  for _, f in ipairs(PAYLOAD_CHUNKS) do h[f] = nil end
  move(ctx, id, h, now, {p = a.payload, at = fmt(ctx, a.at)})
  emit(ctx, id, h, status_name(h, now))
  return load_job(ctx, id)
end

-- Deleting job `id` (prune, purge) frees its key, when the key is still its own.
local function unique_forget(ctx, id, uq)
  local key = string.match(uq, "^%l+ %-?%d+ (.*)$")
  if key == nil then return end
  local k = key_unique(ctx, key)
  if redis.pcall("GET", k) == id then redis.call("DEL", k) end
end
