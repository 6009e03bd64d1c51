-- plain_enqueue.lua: the way most jobs go in, at little more than the cost of their writes.
--
-- An enqueue of one plain job (enqueue.lua's plain: no dependency, dedup key, batch or flow
-- group), new, sent on its own: what a web request's `task.enqueue(...)` sends, with or without
-- a delay, an available_at or a deadline. It writes what enqueue.lua writes for such a job (the
-- sequence, the queue set, the hash, its index entries, the wake-up, the event), but makes none
-- of a call's tables: Lua's collector costs Redis time for every byte a call allocates. Its
-- guarantees are the general way's:
--
-- - Checks before the first write, with the rules of checks.lua. A job they do not pass goes the
--   general way (`fast` returns nil, having written nothing), which words its refusal; so does an
--   id that exists (a re-sent call, a duplicate).
-- - Keys of another type, permissions: only the commands that take writes back are checked
--   against the caller's ACL before the first write (FAST_CHECKED); Redis checks every other
--   command as the call runs it. Each write is a redis.pcall: one refused (a key of another
--   type, a command the ACL refuses) takes back, newest first, the writes before it, and `fast`
--   returns nil. The general way then makes the call from the same state, and answers as it
--   always does: CorruptKey, or the refusal of its permission check that names the command.
--   Redis 6.2 has no such check (nor redis.acl_check_cmd): there the error is raised, after the
--   same undo.

-- uses: core, checks, events, job
local clock, ID_MAX, int, NAME_MAX = Core.clock, Core.ID_MAX, Core.int, Core.NAME_MAX
local PRIORITY_MAX, PRIORITY_MIN, SMALL_NUM = Core.PRIORITY_MAX, Core.PRIORITY_MIN, Core.SMALL_NUM
local id_error, stage_error, text_error = Checks.id_error, Checks.stage_error, Checks.text_error
local time_error, valid_name = Checks.time_error, Checks.valid_name
local EVENTS_MAX, WAKE_MAX = Events.EVENTS_MAX, Events.WAKE_MAX
local new_fields, ready_member = Job.new_fields, Job.ready_member

-- The commands of plain_undo (lower case: a command's name, not a reply's tag).
local FAST_CHECKED = {"hdel", "ltrim", "set", "srem", "zrem"}

-- An integer argument of at least `min`, or nil: the usual small ones looked up.
local function plain_int(s, min)
  local n = SMALL_NUM[s] or int(s)
  if n == nil or n < min then return nil end
  return n
end

-- The job's available_at and deadline (false: none) when every check of enqueue.lua's
-- new_job_checks (deadline_checks with it) and limit_checks passes for it, else nil.
local function plain_checked(args, now)
  local id, queue, stage, payload, input_ref, input_revision, _, priority, max_attempts,
    available_at, delay, odf, _, deadline, expires_in = unpack(args, 8, 22)
  local pr, at, dl = plain_int(priority, PRIORITY_MIN), nil, false
  if available_at ~= "" then
    at = plain_int(available_at, 0)
  else
    local after = delay == "" and 0 or plain_int(delay, 0)
    at = after and now + after
  end
  if at and (deadline ~= "" or expires_in ~= "") then
    local ttl = deadline == "" and plain_int(expires_in, 1)
    dl = (expires_in == "" and int(deadline)) or (ttl and now + ttl)
    if not dl or dl <= now or dl <= at or time_error(dl, "deadline") then return nil end
  end
  -- (an id of printable ASCII but space by one anchored match, what id_error accepts of ASCII;
  -- any other id is decoded by id_error)
  if at == nil or #id > ID_MAX or (not string.find(id, "^[!-~]+$") and id_error(id, "id"))
      or not valid_name(queue, NAME_MAX)
      or #stage == 0 or stage_error(stage) or #input_ref == 0 or text_error(input_ref, "input_ref")
      or not plain_int(input_revision, 0) or not plain_int(max_attempts, 1)
      or pr == nil or pr > PRIORITY_MAX or time_error(at, "available_at")
      or #payload > tonumber(args[3]) or (odf ~= "block" and odf ~= "cancel" and odf ~= "run") then
    return nil
  end
  return at, dl
end

-- Takes back the first w.done writes of fast, newest first (the one that failed wrote nothing):
-- 1 the sequence, 2 the queue set, 3 the hash, 4 the ready or delayed entry, 5 the delayed_pr
-- entry (a job due later), 6 the deadlines entry (a job with a deadline), 7 the wake-up.
local function plain_undo(w)
  local done, prefix, queue, id = w.done, w.prefix, w.queue, w.id
  local kq = prefix .. "q:" .. queue .. ":"
  if done >= 7 then
    local k = kq .. "wake"
    if w.held > 1 then redis.call("LTRIM", k, 0, w.held - 2) else redis.call("LTRIM", k, 1, 0) end
  end
  if done >= 6 and w.dl then redis.call("ZREM", kq .. "deadlines", id) end
  if done >= 5 and w.delayed then redis.call("ZREM", kq .. "delayed_pr", w.member) end
  if done >= 4 then
    if w.delayed then
      redis.call("ZREM", kq .. "delayed", id)
    else
      redis.call("ZREM", kq .. "ready", w.member)
    end
  end
  if done >= 3 then
    local names = {}
    for i = 1, #w.fields, 2 do names[#names + 1] = w.fields[i] end
    redis.call("HDEL", prefix .. "job:" .. id, unpack(names))
  end
  if done >= 2 and w.added == 1 then redis.call("SREM", prefix .. "queues", queue) end
  if done >= 1 then
    if w.seq > 1 then
      redis.call("SET", prefix .. "seq", w.seq - 1)
    else
      redis.call("SET", prefix .. "seq", "0", "PXAT", "1") -- (this call made it: deleted)
    end
  end
end

-- enqueue.lua's call (KEYS, ARGV: see there) for a plain job, or nil, having written nothing,
-- for run_call to make it the general way.
local function fast(keys, args)
  if #args ~= 25 or args[5] ~= "1" then return nil end
  local mode, reply = args[6], args[7]
  -- (the job's arguments, in the order of enqueue.lua's read_group)
  local id, queue, stage, payload, input_ref, input_revision, dependencies, priority,
    max_attempts, available_at, delay, odf, made, deadline, expires_in, dedup, group, batch =
    unpack(args, 8, 25)
  if dependencies ~= "" or dedup ~= "" or group ~= "" or batch ~= ""
      or (mode ~= "all" and mode ~= "each" and mode ~= "skip")
      or (reply ~= "ids" and reply ~= "slim") then
    return nil
  end
  local timed, now = pcall(clock, args[2]) -- (TIME refused: the general way says so)
  if not (timed and now) then return nil end
  local at, dl = plain_checked(args, now)
  if not at then return nil end
  local prefix, allowed = keys[1], redis.acl_check_cmd -- (Redis 7+, Valkey)
  for i = 1, allowed and #FAST_CHECKED or 0 do
    if not allowed(FAST_CHECKED[i], prefix) then return nil end
  end
  local kjob = prefix .. "job:" .. id
  if redis.pcall("EXISTS", kjob) ~= 0 then return nil end -- (exists, or refused: see above)
  local now_text, delayed = string.format("%d", now), at > now
  local at_text = at == now and now_text or string.format("%d", at)
  local kq = prefix .. "q:" .. queue .. ":"
  local h = {s = stage, at = at_text, sq = nil, p = payload, q = queue, ir = input_ref,
    rv = input_revision, dp = "", pd = "0", odf = odf, pr = priority, m = max_attempts,
    ec = made ~= "1" and args[1] or nil, dl = dl and string.format("%d", dl) or nil}
  -- The writes, in order; a refused one leaves the loop (break) with `done` writes to take back.
  local done, failed, seq, added, fields, member, held = 0, nil, nil, nil, nil, nil, 0
  repeat
    -- 1: the sequence
    seq = redis.pcall("INCRBY", prefix .. "seq", "1")
    if type(seq) == "table" then failed = seq; break end
    done = 1
    -- 2: the queue set
    added = redis.pcall("SADD", prefix .. "queues", queue)
    if type(added) == "table" then failed = added; break end
    done = 2
    -- 3: the hash (a new key: EXISTS found none)
    h.sq = string.format("%d", seq)
    fields = new_fields(h, now_text)
    failed = redis.pcall("HSET", kjob, unpack(fields))
    if type(failed) == "table" then break end
    done = 3
    -- 4, 5: its index entries (ready: by priority, then available_at and sequence; delayed: by
    -- time and, in delayed_pr, as ready would hold it)
    member = ready_member(nil, id, h, at, seq)
    failed = redis.pcall("ZADD", kq .. (delayed and "delayed" or "ready"),
      delayed and at_text or priority, delayed and id or member)
    if type(failed) == "table" then break end
    done = 4
    if delayed then
      failed = redis.pcall("ZADD", kq .. "delayed_pr", priority, member)
      if type(failed) == "table" then break end
    end
    done = 5
    -- 6: a deadline's entry (the sweep expires the job at it, unless it started)
    if dl then
      failed = redis.pcall("ZADD", kq .. "deadlines", h.dl, id)
      if type(failed) == "table" then break end
    end
    done = 6
    -- 7: a wake-up for an idle worker (not for a paused queue: resume.lua wakes them then; a
    -- paused set of another type pauses nothing, as call.lua's finish has it)
    if not delayed then
      failed = redis.pcall("SISMEMBER", prefix .. "paused", queue)
      local err = type(failed) == "table" and tostring(failed.err)
      if err and not string.find(err, "WRONGTYPE", 1, true) then break end
      if failed ~= 1 then
        local k = kq .. "wake"
        held = redis.pcall("RPUSH", k, "1")
        if type(held) == "table" then failed = held; break end
        if held > 2 * WAKE_MAX then redis.call("LTRIM", k, -WAKE_MAX, -1) end
        done = 7
      end
    end
    -- 8: the event, last (nothing after it to take back)
    failed = keys[2] and redis.pcall("XADD", keys[2], "MAXLEN", "~", EVENTS_MAX, "*", "job", id,
      "ev", delayed and "scheduled" or "available", "q", queue, "a", "0")
    if type(failed) == "table" then break end
    failed = nil
  until true
  if failed then
    plain_undo({done = done, prefix = prefix, queue = queue, id = id, seq = seq, added = added,
      fields = fields, member = member, delayed = delayed, dl = dl, held = held})
    local err = tostring(failed.err)
    if allowed or string.find(err, "WRONGTYPE", 1, true) then return nil end
    error(err) -- (Redis 6.2: no check up front to name the command; as Redis words it)
  end
  local item = reply == "ids" and id or "0"
  if mode == "each" then return {"EachResult", now_text, {"JobApplied", "", item}} end
  return {"BatchApplied", now_text, item}
end
