-- job.lua: a job hash read, checked, replied and moved between states (its indexes kept).

-- uses: core, checks, index, events, flow_control, batches
local key_job, key_q, NAME_MAX, NONE = Core.key_job, Core.key_q, Core.NAME_MAX, Core.NONE
local num, pcall_typed, refuse, SMALL_NUM = Core.num, Core.pcall_typed, Core.refuse, Core.SMALL_NUM
local split = Core.split
local valid_name = Checks.valid_name
local zadd, zrem = Index.zadd, Index.zrem
local emit, wake = Events.emit, Events.wake
local leases_changed, ready_add, ready_rem = FlowControl.leases_changed, FlowControl.ready_add, FlowControl.ready_rem
local grouped_waiting, ready_score = FlowControl.grouped_waiting, FlowControl.ready_score
local batch_counted = Batches.batch_counted

local DEFAULTS = {rv = "0", a = "0", f = "0", pd = "0", dp = "", ir = "inline", odf = "block",
  pr = "0", m = "3", q = "default"}
-- Fields that must hold integers, and those each state needs.
local NUMERIC = {rv = true, pd = true, pr = true, sq = true, a = true, m = true, f = true,
  ins = true, at = true, x = true, fin = true, att = true, dl = true}
local STATE_NEEDS = {W = "at", R = "at", L = "x", S = "fin", F = "fin", C = "fin", E = "fin"}
local CHUNK = 64
local BLOB_CHUNKS = 16
local BLOBS = {p = true, res = true}
-- The fields a payload may be stored in after its first (field_args: p2 .. p16, BLOB_CHUNKS in
-- all): a new payload drops every one of them, whichever the old one filled.
local PAYLOAD_CHUNKS = {"p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11", "p12",
  "p13", "p14", "p15", "p16"}
local function corrupt(id, reason) return refuse("CorruptJob", id, reason) end

-- Decimal digits only (what fmt writes), at most 15 of them (so within MAXINT), without number
-- parsing: tonumber is strtod, the dearest part of a check run on every field of every job.
local function not_integer(v)
  local n = #v
  return n > 16 or (n == 16 and string.byte(v) ~= 45) or not string.find(v, "^%-?%d+$")
end

-- A new job table, its defaults in place and room made for the fields a job usually has: a table
-- constructor sizes the table once for all its fields (nil ones too), where adding the fields one
-- by one would grow it five times, each time rehashing what it holds. This runs for every job a
-- script loads. DEFAULTS says the same; a stored field overwrites its default.
local function new_job_table()
  return {rv = "0", a = "0", f = "0", pd = "0", dp = "", ir = "inline", odf = "block", pr = "0",
    m = "3", q = "default", s = nil, st = nil, at = nil, sq = nil, p = nil, ins = nil, w = nil,
    x = nil, n = nil, att = nil, fin = nil, o = nil}
end

-- The checks every stored field gets (those holding their default are not stored, and good);
-- not_numeric: the first integer field that holds something else, found while loading.
-- Queue names found valid go to ctx.names_ok (a batch names the same few again and again).
local function check_job(ctx, id, h, not_numeric)
  if not_numeric then return corrupt(id, "field '" .. not_numeric .. "' is not an integer") end
  -- (the fields every job has: a script reads sq when it places a job in the ready index)
  local missing = (h.s == nil and "s") or (h.sq == nil and "sq")
  if missing then return corrupt(id, "field '" .. missing .. "' is missing") end
  local need = STATE_NEEDS[h.st]
  if need == nil then return corrupt(id, "field 'st' holds an unknown state") end
  if h[need] == nil then return corrupt(id, "field '" .. need .. "' is not an integer") end
  local q = h.q
  if q ~= nil and not ctx.names_ok[q] then
    if not valid_name(q, NAME_MAX) then return corrupt(id, "field 'q' is not a valid queue name") end
    ctx.names_ok[q] = true
  end
  if h.st == "L" and (h.w == nil or h.n == nil) then
    return corrupt(id, "a leased job lacks its worker or nonce")
  end
  return nil
end

-- The job as a table of its fields, or nil and a refusal (MissingJob, CorruptJob).
-- What the call keeps of each job it loads: ctx.loaded[id] its raw HGETALL reply and
-- ctx.changed[id] the changes tables moved into it since, in order (see job_reply);
-- ctx.implicit_ins[id] when its inserted_at is not stored (it equals its first available_at).
-- ctx.int_ok: strings this call found to be integers (made at the first job loaded): the times
-- in a batch's jobs are mostly the same few, and a pattern match costs more than a table lookup.
local function load_job(ctx, id)
  local k = key_job(ctx, id)
  local raw = pcall_typed("HGETALL", k)
  if raw.err then
    local kind = redis.call("TYPE", k)["ok"]
    return nil, corrupt(id, "key holds a " .. kind .. ", not a hash")
  end
  if #raw == 0 then return nil, refuse("MissingJob", id) end
  local h, not_numeric, ok = new_job_table(), nil, ctx.int_ok
  if ok == nil then
    ok = {}
    ctx.int_ok = ok
  end
  for i = 1, #raw, 2 do
    local f, v = raw[i], raw[i + 1]
    h[f] = v
    if NUMERIC[f] and not SMALL_NUM[v] and not ok[v] and not_numeric == nil then
      if not_integer(v) then not_numeric = f else ok[v] = true end
    end
  end
  local bad = check_job(ctx, id, h, not_numeric)
  if bad then return nil, bad end
  if h.ins == nil and h.at ~= nil then
    h.ins = h.at
    ctx.implicit_ins[id] = true
  end
  ctx.loaded[id], ctx.changed[id] = raw, nil
  return h
end

-- Flat reply for a job: {id, field, value, field, value, ...}; a later field overrides an
-- earlier one, fields holding their default may be absent, and blobs may come in chunks (the
-- client joins them). A job loaded in this call replies with its raw HGETALL reply and the
-- fields written since, which is cheaper than walking the table.
local function job_reply(ctx, id, h)
  local raw = ctx.loaded[id]
  local out = {id}
  if raw == nil then
    for f, v in pairs(h) do
      out[#out + 1] = f
      out[#out + 1] = v
    end
    return out
  end
  local n = #raw + 1
  for i = 1, #raw do out[i + 1] = raw[i] end
  for _, changes in ipairs(ctx.changed[id] or NONE) do
    for f, v in pairs(changes) do
      out[n + 1] = f
      out[n + 2] = v
      n = n + 2
    end
  end
  return out
end

-- HSET arguments for field f: a blob in chunks of CHUNK bytes, anything else as it is.
local function field_args(args, f, v)
  if BLOBS[f] and #v > CHUNK and #v <= CHUNK * BLOB_CHUNKS then
    args[#args + 1] = f
    args[#args + 1] = string.sub(v, 1, CHUNK)
    local i = 2
    for start = CHUNK + 1, #v, CHUNK do
      args[#args + 1] = f .. i
      args[#args + 1] = string.sub(v, start, start + CHUNK - 1)
      i = i + 1
    end
  else
    args[#args + 1] = f
    args[#args + 1] = v
  end
end

-- A new job's fields but those holding their default (see DEFAULTS), as HSET arguments: this
-- runs for every job of a batch, and for a plain job's enqueue (plain_enqueue.lua).
local function new_fields(h, now_text)
  local args = {"s", h.s, "st", "W", "at", h.at, "sq", h.sq}
  field_args(args, "p", h.p)
  if h.q ~= "default" then args[#args + 1] = "q"; args[#args + 1] = h.q end
  if h.ir ~= "inline" then args[#args + 1] = "ir"; args[#args + 1] = h.ir end
  if h.rv ~= "0" then args[#args + 1] = "rv"; args[#args + 1] = h.rv end
  if h.dp ~= "" then args[#args + 1] = "dp"; args[#args + 1] = h.dp end
  if h.pd ~= "0" then args[#args + 1] = "pd"; args[#args + 1] = h.pd end
  if h.odf ~= "block" then args[#args + 1] = "odf"; args[#args + 1] = h.odf end
  if h.pr ~= "0" then args[#args + 1] = "pr"; args[#args + 1] = h.pr end
  if h.m ~= "3" then args[#args + 1] = "m"; args[#args + 1] = h.m end
  if h.at ~= now_text then args[#args + 1] = "ins"; args[#args + 1] = now_text end
  if h.ec then args[#args + 1] = "ec"; args[#args + 1] = h.ec end
  if h.dl then args[#args + 1] = "dl"; args[#args + 1] = h.dl end
  if h.uq then args[#args + 1] = "uq"; args[#args + 1] = h.uq end
  if h.g then args[#args + 1] = "g"; args[#args + 1] = h.g end
  if h.rd then args[#args + 1] = "rd"; args[#args + 1] = h.rd end
  if h.bt then args[#args + 1] = "bt"; args[#args + 1] = h.bt end
  return args
end

-- Indexes
-- A W job sits in exactly one of: blocked (unmet dependencies, by available_at), delayed (not
-- yet due, by available_at) or ready (score priority, member "<available_at><seq><id>", so
-- that ties go by availability, then enqueue order). An R job sits in retrying (by
-- available_at) and in one of delayed / ready. L jobs sit in leased (by expires_at); finished
-- jobs in succeeded / failed / cancelled (by finished_at). Counts and pages by status are
-- derived from these (counts.lua, list_jobs.lua): no index holds every waiting job twice.
-- Every job in delayed is also in delayed_pr, as ready would hold it (score priority, the same
-- member): so a claim finds the best due jobs among many come due at once, priority by priority
-- (promote_due.lua's promote_best), where delayed gives them by due time alone.

-- Members sort by available_at, then sequence: both as fixed-width big-endian bytes (6 and 5:
-- available_at below 2^48 ms, sequence below 2^40), then the id. Binary rather than hex keeps a
-- member with a 16-character id within 32 bytes of memory (Redis compares members as bytes).
-- ctx.at_bytes (made at the first): the 6 bytes of each available_at met in this call (a batch
-- shares one or a few).
local READY_PREFIX = 11

-- ctx: nil for no cache (plain_enqueue.lua's one job). at, sq: h.at and h.sq as numbers, when
-- the caller has them. (Each number in two parts below 2^24, whose bytes take no more division.)
local function ready_member(ctx, id, h, at, sq)
  local floor, char = math.floor, string.char
  local at_bytes = ctx and ctx.at_bytes
  if ctx and at_bytes == nil then
    at_bytes = {}
    ctx.at_bytes = at_bytes
  end
  local prefix = at_bytes and at_bytes[h.at]
  if prefix == nil then
    at = at or tonumber(h.at)
    local hi, lo = floor(at / 16777216), at % 16777216
    prefix = char(floor(hi / 65536) % 256, floor(hi / 256) % 256, hi % 256, floor(lo / 65536),
      floor(lo / 256) % 256, lo % 256)
    if at_bytes then at_bytes[h.at] = prefix end
  end
  sq = sq or num(h.sq)
  local hi, lo = floor(sq / 16777216), sq % 16777216
  return prefix .. char(floor(hi / 256) % 256, hi % 256, floor(lo / 65536), floor(lo / 256) % 256,
    lo % 256) .. id
end

local function ready_id(member) return string.sub(member, READY_PREFIX + 1) end

local FINISHED = {S = "succeeded", F = "failed", C = "cancelled", E = "expired"}

-- Dependencies not yet succeeded (pd > 0); the usual "0" needs no number parsing.
local function blocked(h) return h.pd ~= "0" and num(h.pd) > 0 end

-- A waiting job never started (never leased) with a deadline: indexed in its queue's `deadlines`
-- by it, so the sweep finds it (sweep_expired.lua); a job without one costs one field lookup.
local function awaits_deadline(h) return h.dl ~= nil and h.st == "W" and h.att == nil end

-- Past its deadline at `now` and never started: no claim may lease it, it expires (st E).
local function past_deadline(h, now) return awaits_deadline(h) and tonumber(h.dl) <= now end

-- Events name the status a job enters (docs/lifecycle.md): a waiting job is blocked, available
-- or scheduled; every other state has one status.
local STATUS_OF = {R = "retryable", L = "executing", S = "completed", F = "discarded",
  C = "cancelled", E = "expired"}

local function status_name(h, now)
  if h.st ~= "W" then return STATUS_OF[h.st] end
  if blocked(h) then return "blocked" end
  return tonumber(h.at) <= now and "available" or "scheduled"
end

-- The status a job shows at `now` (counts.lua, list_jobs.lua): the one it entered, but a
-- retry-waiting job whose time has come is available, as a claim sees it.
local function status_at(h, now)
  if h.st == "R" and tonumber(h.at) <= now then return "available" end
  return status_name(h, now)
end

-- member: the job's entry in the ready index, when the caller took it from there (a claim by
-- queue): nothing else to remove.
local function unplace(ctx, id, h, member)
  local q = h.q
  if awaits_deadline(h) then zrem(ctx, key_q(ctx, q, "deadlines"), id) end
  if h.st == "W" or h.st == "R" then
    if h.st == "R" then zrem(ctx, key_q(ctx, q, "retrying"), id) end
    if blocked(h) then
      zrem(ctx, key_q(ctx, q, "blocked"), id)
    elseif member then
      ready_rem(ctx, q, h, member)
    else
      member = ready_member(ctx, id, h)
      ready_rem(ctx, q, h, member)
      zrem(ctx, key_q(ctx, q, "delayed"), id)
      zrem(ctx, key_q(ctx, q, "delayed_pr"), member)
    end
  elseif h.st == "L" then
    zrem(ctx, key_q(ctx, q, "leased"), id)
    leases_changed(ctx, q, h, -1)
  else
    zrem(ctx, key_q(ctx, q, FINISHED[h.st]), id)
  end
end

-- Scores go as the stored decimal strings (checked integers): no number formatting.
local function place(ctx, id, h, now)
  local q = h.q
  if awaits_deadline(h) then zadd(ctx, key_q(ctx, q, "deadlines"), h.dl, id) end
  if h.st == "W" or h.st == "R" then
    if h.st == "R" then zadd(ctx, key_q(ctx, q, "retrying"), h.at, id) end
    if h.g and (blocked(h) or tonumber(h.at) > now) then grouped_waiting(ctx, q) end
    if blocked(h) then
      zadd(ctx, key_q(ctx, q, "blocked"), h.at, id)
    elseif tonumber(h.at) <= now then
      ready_add(ctx, q, h, ready_member(ctx, id, h))
      wake(ctx, q)
    else
      zadd(ctx, key_q(ctx, q, "delayed"), h.at, id)
      zadd(ctx, key_q(ctx, q, "delayed_pr"), ready_score(ctx, h), ready_member(ctx, id, h))
    end
  elseif h.st == "L" then
    zadd(ctx, key_q(ctx, q, "leased"), h.x, id)
    leases_changed(ctx, q, h, 1)
  else
    zadd(ctx, key_q(ctx, q, FINISHED[h.st]), h.fin, id)
  end
end

-- Moves a job to a new state: index out, fields written, index in, and an event when the
-- state changed or the job's last pending dependency succeeded; a batch member's batch counts it.
local function move(ctx, id, h, now, changes, member)
  local before, held_back = h.st, h.pd ~= "0"
  unplace(ctx, id, h, member)
  -- HSET's arguments: room for the usual number of fields made at once (see new_job_table).
  local args, n = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}, 0
  for f, v in pairs(changes) do
    h[f] = v
    if BLOBS[f] then
      field_args(args, f, v)
      n = #args
    else
      args[n + 1] = f
      args[n + 2] = v
      n = n + 2
    end
  end
  -- What job_reply adds to the fields loaded: the changes tables themselves, in order.
  local changed_of = ctx.changed
  local changed = changed_of[id]
  if changed == nil then
    changed = {}
    changed_of[id] = changed
  end
  changed[#changed + 1] = changes
  if changes.at and ctx.implicit_ins[id] then -- available_at moves on: keep inserted_at
    args[n + 1] = "ins"
    args[n + 2] = h.ins
    ctx.implicit_ins[id] = nil
    changed[#changed + 1] = {ins = h.ins}
  end
  redis.call("HSET", key_job(ctx, id), unpack(args))
  place(ctx, id, h, now)
  if h.bt and h.st ~= before then batch_counted(ctx, h.bt, before, h.st) end
  if h.st ~= before or (held_back and not blocked(h)) then
    emit(ctx, id, h, status_name(h, now))
  end
end


-- docs/lifecycle.md's dependency_error over a job's dependency list: the first dependency not
-- succeeded (under "run": not ended).
local function dependency_error(ctx, h)
  local run = h.odf == "run"
  for _, dep in ipairs(split(h.dp or "")) do
    local d, err = load_job(ctx, dep)
    if d == nil then
      if err[1] == "MissingJob" then return refuse("MissingDependency", dep) end
      return err
    end
    if d.st ~= "S" and not (run and FINISHED[d.st]) then
      return refuse("IncompleteDependency", dep)
    end
  end
  return nil
end

