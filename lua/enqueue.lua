-- enqueue: (nothing) -> Waiting(available_at), for one job or a batch of jobs, all or nothing.
-- Checks, in order (docs/lifecycle.md, enqueue), job by job: the new job's own (new_job_checks
-- below), then our limits, then DuplicateJob, then each dependency: MissingDependency when it
-- does not exist (nor earlier in this batch), IncompleteDependency when it can never succeed
-- (Cancelled or Expired, or Failed for a job that asked to be cancelled on dependency failure;
-- never for a job under "run", for which a dependency that ended counts as resolved); then the
-- keys its write touches (CorruptKey). A job may depend on an earlier job of the same batch.
-- A single plain new job is written by plain_enqueue.lua's fast, registered before main: main
-- makes the calls it declines (a refusal, an id that exists, a key of another type, a command
-- the ACL refuses), and every other.
-- An id that exists with a lower input revision than the one given is superseded instead
-- (include/revise.lua): a live job takes the new input; a lower revision is StaleRevision.
--
-- Two modes. "all": the batch is applied whole or not at all (the first refusal names its job).
-- "each": every job is checked and applied on its own (a refused job does not stop the others;
-- a later job may still depend on an earlier applied one): how the asyncio client coalesces
-- concurrent single enqueues into one call.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id          ARGV[2] now ("" = server clock)
-- ARGV[3]  max payload bytes ARGV[4] max dependencies per job  ARGV[5] job count N
-- ARGV[6]  mode: "all" | "each" | "skip"   ARGV[7] reply: "slim" | "ids"
--   (slim: a job this call creates as its count of dependencies not yet succeeded, as a string:
--   the client sent the rest; a job a re-sent call finds as every field)
-- then N groups of 17: id, queue, stage, payload, input_ref, input_revision,
--   dependencies (space-separated ids), priority, max_attempts, available_at ("" = now + delay),
--   delay ("" = 0), on_dependency_failure ("block" | "cancel" | "run"), made ("1" when the
--   client made the id at random for this call, else ""), deadline (ms since the epoch, "" = none),
--   expires_in (ms from now, "" = none; at most one of the two), dedup ("" or
--   "<mode> <window ms> <key>": see lua/include/unique.lua; checked just before DuplicateJob),
--   group ("" = none: the job's flow group, include/flow_control.lua; a job id's rule),
--   batch ("" = none: the open batch it joins, include/batches.lua; a member must be a new job:
--   an id that exists is DuplicateJob, or skipped in "skip" mode; no dedup key).
--
-- Deduplicated jobs. A job whose dedup key another job holds is answered with that job instead
-- of going in (a debounce rewrites it first); so is, in "skip" mode (an "all" that skips
-- duplicates), a job whose id exists or came earlier in the batch. In a batch the first job with
-- a key decides for the later ones. Such a job's item is {job} (a list of one: the holder whole,
-- or its id alone in "ids" replies); in "each" mode {"JobDeduplicated", "", job}. A call that
-- deduplicated or superseded a job keeps a call record of every job's answer (true, the holder's
-- id, or {"revised"} for a job it superseded), so a re-sent call gets the same answers and
-- writes nothing more.
--
-- Replies
--   all:  {"BatchApplied", now, job...}        each job as above (slim) or as its id alone
--                                              (ids); a re-sent call: now "" and each job as
--                                              {id, field, value, ...}
--         {"BatchRefused", index, {refusal...}} index is 1-based within the batch
--   each: {"EachResult", now, item...}          item: {"JobApplied", "", job} (job as above) or
--                                              a refusal
--   refusal: InvalidJob(reason) | DuplicateJob(id) | StaleRevision(id, stored revision) |
--            MissingDependency(id) |
--            IncompleteDependency(id) | CorruptJob(id, reason) | CorruptKey(key, reason) |
--            MissingBatch(batch) | BatchClosed(batch)
-- A re-sent call (same call id) gets the jobs it applied as applied again (as they are now), and,
-- in "each" mode, every refused job its first refusal again (kept in a call record, written
-- only when a job was refused, deduplicated or superseded). A job whose id the caller chose
-- keeps the id of the call that created it (field ec); one whose id the client made at random
-- for this call needs no such field: only this call can have created a job with that id.

-- uses: core, checks, events, job, call, flow_control, unique, revise, batches, plain_enqueue
local applied, clock, fmt, ID_MAX, int = Core.applied, Core.clock, Core.fmt, Core.ID_MAX, Core.int
local invalid, key_dependents, key_job = Core.invalid, Core.key_dependents, Core.key_job
local key_queues, key_seq, PRIORITY_MAX = Core.key_queues, Core.key_seq, Core.PRIORITY_MAX
local PRIORITY_MIN, refuse, split = Core.PRIORITY_MIN, Core.refuse, Core.split
local TERMINAL = Core.TERMINAL
local fast = PlainEnqueue.fast -- (one plain job: see there)
local id_error, int_arg, name_error = Checks.id_error, Checks.int_arg, Checks.name_error
local check_queue = Checks.check_queue
local stage_error, text_error, time_error = Checks.stage_error, Checks.text_error, Checks.time_error
local writes_error = Checks.writes_error
local emit, wake = Events.emit, Events.wake
local blocked, job_reply, new_fields = Job.blocked, Job.job_reply, Job.new_fields
local load_job, place, status_name = Job.load_job, Job.place, Job.status_name
local decode_items, encode_items, record = Call.decode_items, Call.encode_items, Call.record
local recorded, run_call = Call.recorded, Call.run_call
local debounce, unique_arg = Unique.debounce, Unique.unique_arg
local unique_holder, unique_take = Unique.unique_holder, Unique.unique_take
local revision_changes, rewrite = Revise.revision_changes, Revise.rewrite
local supersede_error = Revise.supersede_error
local flow_error = FlowControl.flow_error
local batch_join, join_error = Batches.batch_join, Batches.join_error

local GROUP = 18

-- A batch repeats the same few values (attempts, priority, stage, queue): each is checked once a
-- call, in the call's memo (m.ints: integer arguments parsed; m.stages: stages found valid; queue
-- names found valid go to ctx.names_ok, as a loaded job's queue does). Only successes are kept:
-- a refusal is worded for its argument.
local function int_memo(m, s, what)
  local n = m.ints[s]
  if n ~= nil then return n end
  local v, e = int_arg(s, what)
  if v ~= nil then m.ints[s] = v end
  return v, e
end

local NO_DEPS = {} -- shared by every job without dependencies: never written to

-- A deadline (absolute, or expires_in from now): after both now and available_at, so that the
-- job can be claimed before it; a.dl the deadline, or nil. A job without one pays two compares.
local function deadline_checks(a, now, m)
  if a.deadline == "" and a.expires_in == "" then return nil end
  if a.deadline ~= "" and a.expires_in ~= "" then
    return invalid("give deadline or expires_in, not both")
  end
  local dl
  if a.deadline ~= "" then
    local e
    dl, e = int_memo(m, a.deadline, "deadline")
    if dl == nil then return e end
  else
    local ttl, e = int_memo(m, a.expires_in, "expires_in")
    if ttl == nil then return e end
    if ttl < 1 then return invalid("expires_in must be positive") end
    dl = now + ttl
  end
  if dl <= now then return invalid("deadline must be in the future") end
  if dl <= a.at then return invalid("deadline must be after available_at") end
  a.dl = dl
  return time_error(dl, "deadline")
end

local function new_job_checks(a, now, m)
  if a.id == "" then return invalid("id must not be empty") end
  if a.stage == "" then return invalid("stage must not be empty") end
  if a.input_ref == "" then return invalid("input_ref must not be empty") end
  local rv, e1 = int_memo(m, a.input_revision, "input_revision")
  if rv == nil then return e1 end
  if rv < 0 then return invalid("input_revision must be nonnegative") end
  local attempts, e2 = int_memo(m, a.max_attempts, "max_attempts")
  if attempts == nil then return e2 end
  if attempts < 1 then return invalid("max_attempts must be positive") end
  local at
  if a.available_at ~= "" then
    local e3
    at, e3 = int_memo(m, a.available_at, "available_at")
    if at == nil then return e3 end
    if at < 0 then return invalid("available_at must be nonnegative") end
  else
    local delay, e4 = int_memo(m, a.delay == "" and "0" or a.delay, "delay")
    if delay == nil then return e4 end
    if delay < 0 then return invalid("delay must be nonnegative") end
    at = now + delay
  end
  a.at = at
  return time_error(at, "available_at") or deadline_checks(a, now, m)
end

local function name_checks(ctx, a, m)
  local bad = id_error(a.id, "id")
  if bad then return bad end
  if not ctx.names_ok[a.queue] then
    bad = name_error(a.queue, "queue")
    if bad then return bad end
    ctx.names_ok[a.queue] = true
  end
  if not m.stages[a.stage] then
    bad = stage_error(a.stage)
    if bad then return bad end
    m.stages[a.stage] = true
  end
  if a.group ~= "" then -- (groups found valid: m.groups, made at the first)
    local groups = m.groups or {}
    m.groups = groups
    if not groups[a.group] then
      bad = id_error(a.group, "group")
      if bad then return bad end
      groups[a.group] = true
    end
  end
  return text_error(a.input_ref, "input_ref")
end

local function limit_checks(ctx, a, max_payload, max_deps, m)
  local bad = name_checks(ctx, a, m)
  if bad then return bad end
  if #a.payload > max_payload then
    return invalid("payload is " .. #a.payload .. " bytes, over the limit of " .. max_payload)
  end
  local pr, e = int_memo(m, a.priority, "priority")
  if pr == nil then return e end
  if pr < PRIORITY_MIN or pr > PRIORITY_MAX then
    return invalid("priority must be between " .. PRIORITY_MIN .. " and " .. PRIORITY_MAX)
  end
  if a.odf ~= "block" and a.odf ~= "cancel" and a.odf ~= "run" then
    return invalid("on_dependency_failure must be 'block', 'cancel' or 'run'")
  end
  if a.dependencies == "" then
    a.deps = NO_DEPS
    return nil
  end
  a.deps = split(a.dependencies)
  if #a.deps > max_deps then
    return invalid("a job may have at most " .. max_deps .. " dependencies")
  end
  local seen = {}
  for _, d in ipairs(a.deps) do
    local bad = id_error(d, "dependency")
    if bad then return bad end
    if seen[d] then return invalid("dependency " .. d .. " is listed twice") end
    seen[d] = true
  end
  return nil
end

-- Counts the dependencies not yet succeeded; refuses those that cannot ever succeed. Under
-- "run" a dependency that ended in any way counts as resolved (a.rd lists those that did not
-- succeed: include/cascades.lua's counted).
local function dependency_checks(ctx, a, batch)
  local pending = 0
  a.rd = nil
  for _, d in ipairs(a.deps) do
    if batch[d] then
      pending = pending + 1
    else
      local h, err = load_job(ctx, d)
      if h == nil then
        if err[1] == "MissingJob" then return nil, refuse("MissingDependency", d) end
        return nil, err
      end
      if a.odf == "run" and TERMINAL[h.st] then
        if h.st ~= "S" then a.rd = a.rd and a.rd .. " " .. d or d end
      elseif h.st == "C" or h.st == "E" or (h.st == "F" and a.odf == "cancel") then
        return nil, refuse("IncompleteDependency", d)
      elseif h.st ~= "S" then
        pending = pending + 1
      end
    end
  end
  return pending
end

-- Job i's group of arguments by name: the layout quasar_redis/_schema.py's ENQUEUE_ITEM declares
-- (tests/test_schema.py holds the two to each other).
local function read_group(args, i)
  local b = 7 + (i - 1) * GROUP
  return {
    id = args[b + 1], queue = args[b + 2], stage = args[b + 3], payload = args[b + 4],
    input_ref = args[b + 5], input_revision = args[b + 6], dependencies = args[b + 7],
    priority = args[b + 8], max_attempts = args[b + 9], available_at = args[b + 10],
    delay = args[b + 11], odf = args[b + 12], made = args[b + 13] == "1",
    deadline = args[b + 14], expires_in = args[b + 15], dedup = args[b + 16], group = args[b + 17],
    batch = args[b + 18],
  }
end

-- The arguments of a job a script enqueues of its own (fire_schedule), as read_group reads them:
-- `fields`, and every argument not among them at its default.
local ARG_DEFAULTS = {input_ref = "inline", input_revision = "0", dependencies = "",
  priority = "0", max_attempts = "3", available_at = "", delay = "", odf = "block", made = false,
  deadline = "", expires_in = "", dedup = "", group = "", batch = ""}
local function job_args(fields)
  for name, value in pairs(ARG_DEFAULTS) do
    if fields[name] == nil then fields[name] = value end
  end
  return fields
end

-- True when no job of the call exists yet, asked with one EXISTS for them all (rather than one a
-- job): then no job needs its own duplicate check (a job the call itself created is in `batch`).
local function none_exist(ctx, jobs)
  local keys, found = {}, 0
  for i, a in ipairs(jobs) do keys[i] = key_job(ctx, a.id) end
  for i = 1, #keys, 1000 do
    found = found + redis.call("EXISTS", unpack(keys, i, math.min(#keys, i + 999)))
  end
  return found == 0
end

-- What a new job's write touches, by the index it goes to (see writes_error): 5 TYPE calls.
-- A job with a deadline also goes to the queue's deadlines index.
local DEADLINE_WRITES = {"deadlines"}
local WRITES = {
  ready = {"ready", wake = true, namespace = true},
  delayed = {"delayed", "delayed_pr", namespace = true},
  blocked = {"blocked", namespace = true},
}

-- An enqueue answered from what an earlier delivery wrote (its jobs found, or a job that exists
-- refused) writes the sequence again, as it is, for the reason call.lua's recorded writes a
-- call record again: a durable client's WAIT on another connection then covers those writes.
-- Once a call, however many of its jobs are refused.
local function written_again(ctx)
  if ctx.written_again then return end
  ctx.written_again = true
  local seq = redis.pcall("GET", key_seq(ctx))
  if type(seq) == "string" then redis.pcall("SET", key_seq(ctx), seq) end
end

-- A duplicate id in "skip" mode: answered with the job of that id (a.held; a.held_h when it
-- existed before this call), or a refusal when that job is damaged.
local function skipped(ctx, a, batch)
  a.held = a.id
  if batch[a.id] then return nil end
  local h, err = load_job(ctx, a.id)
  a.held_h = h
  return err
end

-- An id that exists already (stored before this call, or in "each" mode applied earlier in it):
-- a higher input revision of a live job supersedes it (include/revise.lua; a.revised then holds
-- the job); else a refusal, or in "skip" mode, for a duplicate, the job of that id.
local function check_stored(ctx, a, limits, batch)
  local h, err = load_job(ctx, a.id)
  local bad = err or (a.batch ~= "" and refuse("DuplicateJob", a.id))
    or supersede_error(a.id, h, tonumber(a.input_revision))
  if bad then
    written_again(ctx)
    if limits.skip and bad[1] == "DuplicateJob" then return skipped(ctx, a, batch) end
    return bad
  end
  a.revised = h
  return check_queue(ctx, h.q)
end

-- Every check of one job, given the ids applied earlier in this call; nil when it may go in or
-- is answered by another job (a.held).
local function check_one(ctx, a, now, limits, batch)
  local bad = new_job_checks(a, now, limits)
    or limit_checks(ctx, a, limits.payload, limits.deps, limits)
    or (a.dedup ~= "" and unique_arg(a)) or nil
  if bad then return bad end
  if a.batch ~= "" then
    if a.u then return invalid("a batch member cannot have a dedup key") end
    bad = join_error(ctx, a.batch)
    if bad then return bad end
  end
  if a.u then
    bad = unique_holder(ctx, a, now, limits.taken, WRITES)
    if bad or a.held then return bad end
  end
  -- (in "each" mode a job applied earlier in the call is as stored: as if sent on its own)
  if batch[a.id] and not limits.each then
    if limits.skip then return skipped(ctx, a, batch) end
    return refuse("DuplicateJob", a.id)
  end
  if batch[a.id] or (not limits.none_exist and redis.call("EXISTS", key_job(ctx, a.id)) == 1) then
    return check_stored(ctx, a, limits, batch)
  end
  local pending, err = dependency_checks(ctx, a, batch)
  if pending == nil then return err end
  a.pending = pending
  local index = pending > 0 and "blocked" or (a.at <= now and "ready" or "delayed")
  return writes_error(ctx, a.queue, WRITES[index])
    or (a.dl and writes_error(ctx, a.queue, DEADLINE_WRITES))
    or (a.group ~= "" and flow_error(ctx, a.queue, a.group)) or nil
end

-- The supersede of a job check_stored found (a.revised). Its field ec keeps the id of the call
-- that created it; a call that revises a job writes a call record instead (REVISED), so that
-- when re-sent it answers from it rather than revise again.
local function revise_one(ctx, a, now)
  local h = a.revised
  rewrite(ctx, a.id, h, now, revision_changes(ctx, h, now, {p = a.payload,
    rv = a.input_revision, ir = a.input_ref}))
  return h
end
local REVISED = {"revised"} -- a record's item of a job the call revised (no reply tag)

local function write_one(ctx, a, now, seq, now_text)
  if a.revised then return revise_one(ctx, a, now) end
  local h = {
    q = a.queue, s = a.stage, p = a.payload, ir = a.input_ref, rv = a.input_revision,
    dp = a.deps == NO_DEPS and "" or table.concat(a.deps, " "), pd = fmt(ctx, a.pending),
    odf = a.odf, pr = a.priority, sq = fmt(ctx, seq), a = "0", m = a.max_attempts, f = "0",
    st = "W",
    at = a.at == now and now_text or fmt(ctx, a.at), ins = now_text,
  }
  if not a.made then h.ec = ctx.args[1] end -- the call id
  if a.dl then h.dl = fmt(ctx, a.dl) end
  if a.group ~= "" then h.g = a.group end
  h.rd = a.rd
  if a.batch ~= "" then
    h.bt = a.batch
    batch_join(ctx, a.batch, a.id)
  end
  if a.u then
    h.uq = a.dedup
    unique_take(ctx, a)
  end
  local k, fields = key_job(ctx, a.id), new_fields(h, now_text)
  redis.call("HSET", k, unpack(fields)) -- (a new key: EXISTS found none)
  place(ctx, a.id, h, now)
  emit(ctx, a.id, h, status_name(h, now))
  for _, d in ipairs(a.deps) do
    redis.call("SADD", key_dependents(ctx, d), a.id)
    redis.call("HSET", key_job(ctx, d), "hd", "1")
  end
  return h
end

-- How a job goes into the reply; fresh: created by this very call (not found by a re-send).
local function job_out(ctx, id, h, reply, fresh)
  if reply == "ids" then return id end
  if fresh then return h.pd end
  return job_reply(ctx, id, h)
end

-- The job that answers job `a` (a.held), as it is now: one this call wrote (written), one that
-- existed before it, rewritten first by a debounce, or one that answered an earlier job of the
-- call with the same key (read again: a debounce may have rewritten it).
-- A debounce rewrites the job as this call left it (revised by an earlier job of the call, say):
-- written keeps it so after.
local function held_job(ctx, a, now, written)
  local h = a.held_h
  if h == nil then return written[a.held] or load_job(ctx, a.held) end
  if a.debounce then
    a.held_h = written[a.held] or h
    written[a.held] = debounce(ctx, a, now)
    return written[a.held]
  end
  return written[a.held] or h
end

-- A job this call checked: the key it holds for the later jobs of the call.
local function took(limits, a)
  if a.u then limits.taken[a.u.key] = a.held or a.id end
end

-- The sequence numbers of `n` new jobs: the one before them.
local function take_seq(ctx, n)
  return redis.call("INCRBY", key_seq(ctx), fmt(ctx, n)) - n
end

-- The namespace's queue set lists q.
local function list_queue(ctx, q) redis.call("SADD", key_queues(ctx), q) end

-- "all" (and "skip"): check every job, then write them all. Returns the reply and, when a job
-- was answered by another, the call record (every job's answer: see the header).
local function enqueue_all(ctx, jobs, now, limits, reply)
  local batch, queues, fresh = {}, {}, 0
  for i, a in ipairs(jobs) do
    local bad = check_one(ctx, a, now, limits, batch)
    if bad then return refuse("BatchRefused", fmt(ctx, i), bad) end
    took(limits, a)
    if not a.held then
      batch[a.id] = true
      queues[a.revised and a.revised.q or a.queue] = true
      fresh = fresh + 1
      if a.revised then limits.revised = true end
    end
  end
  -- (INCRBY first: on Redis 6.2, which checks each command where a script runs it, a user who
  -- may not enqueue is refused it before anything is written)
  local seq = fresh > 0 and take_seq(ctx, fresh) or 0
  for q in pairs(queues) do list_queue(ctx, q) end
  local out = {"BatchApplied", fmt(ctx, now)}
  if fresh == #jobs and not limits.revised then
    for i, a in ipairs(jobs) do
      local h = write_one(ctx, a, now, seq + i, limits.now_text)
      out[#out + 1] = job_out(ctx, a.id, h, reply, true)
    end
    return out, nil
  end
  local kept, written, debounced = {}, {}, false
  for i, a in ipairs(jobs) do
    if a.held then
      local h = held_job(ctx, a, now, written)
      out[#out + 1] = {job_out(ctx, a.held, h, reply, false)}
      kept[i] = {"JobDeduplicated", a.held}
      debounced = debounced or a.debounce
    else
      -- (a job an earlier debounce of this call rewrote is superseded as that left it: its
      -- index entries and fields are those the debounce wrote)
      if a.revised and written[a.id] then a.revised = written[a.id] end
      seq = seq + 1
      written[a.id] = write_one(ctx, a, now, seq, limits.now_text)
      out[#out + 1] = job_out(ctx, a.id, written[a.id], reply, not a.revised)
      kept[i] = a.revised and REVISED or true
    end
  end
  if debounced or limits.revised then
    -- (a job a later debounce or supersede rewrote replies as it is now, not as it was)
    for i, a in ipairs(jobs) do
      local id = a.held or a.id
      if (a.held or a.revised) and written[id] then
        local item = job_out(ctx, id, written[id], reply, false)
        out[i + 2] = a.held and {item} or item
      end
    end
  end
  return out, encode_items(kept)
end

-- A job this very call created (a re-sent call): its hash keeps the call id (field ec), or its
-- id was made at random for this call; so an applied enqueue needs no call record of its own.
local function created_by(ctx, a)
  if #a.id == 0 or #a.id > ID_MAX then return nil end
  local h = load_job(ctx, a.id)
  if h and (h.ec == ctx.args[1] or (a.made and h.ec == nil)) then return h end
  return nil
end

-- "each": check and write job by job; a refusal is that job's answer only. Returns the reply and
-- what a call record keeps of the job (true: applied; else the refusal, given again as it is to
-- a re-sent call).
-- The sequence number of the next job written in "each" mode: the first one takes a number for
-- itself and every job after it (`left` of them: one INCRBY a call, not one INCR a job; a later
-- job refused leaves a gap, which orders nothing differently).
local function next_seq(ctx, limits, left)
  if limits.seq == nil then
    limits.seq = take_seq(ctx, left)
  end
  limits.seq = limits.seq + 1
  return limits.seq
end

-- The i-th job `a` of `each`: {jobs, batch (the ids applied so far), reply, before (what the
-- record of a re-sent call kept)}.
local function each_one(ctx, a, now, limits, each, i)
  local batch, before, reply, left = each.batch, each.before[i], each.reply, #each.jobs - i + 1
  if type(before) == "table" then
    if before[1] == REVISED[1] then
      local h, err = load_job(ctx, a.id) -- (revised by the first delivery: as it is now)
      if h == nil then return err, REVISED end
      batch[a.id] = true
      return applied("JobApplied", "", job_out(ctx, a.id, h, reply, false)), REVISED
    end
    if before[1] ~= "JobDeduplicated" then return before, before end
    local h, err = load_job(ctx, before[2])
    if h == nil then return err, before end
    return applied("JobDeduplicated", "", job_reply(ctx, before[2], h)), before
  end
  local h = limits.resent and created_by(ctx, a) or nil
  local fresh = h == nil
  if fresh then
    local bad = check_one(ctx, a, now, limits, batch)
    if bad then return bad, bad end
    took(limits, a)
    if a.held then
      local held = held_job(ctx, a, now, each.written)
      return applied("JobDeduplicated", "", job_reply(ctx, a.held, held)),
        {"JobDeduplicated", a.held}
    end
    local q, seq = a.revised and a.revised.q or a.queue, next_seq(ctx, limits, left)
    if not limits.listed[q] then
      list_queue(ctx, q)
      limits.listed[q] = true
    end
    h = write_one(ctx, a, now, seq, limits.now_text)
    each.written[a.id] = h
    fresh = not a.revised
  end
  batch[a.id] = true
  local kept = a.revised and REVISED or true
  return applied("JobApplied", "", job_out(ctx, a.id, h, reply, fresh)), kept
end

-- A call record is written only when some job was refused or revised: the jobs it created carry
-- the call id.
local function enqueue_each(ctx, jobs, now, limits, reply, before)
  local kept, out, refused = {}, {"EachResult", fmt(ctx, now)}, false
  local each = {jobs = jobs, batch = {}, reply = reply, before = before, written = {}}
  for i, a in ipairs(jobs) do
    out[#out + 1], kept[i] = each_one(ctx, a, now, limits, each, i)
    refused = refused or kept[i] ~= true
  end
  return out, refused and encode_items(kept) or nil
end

-- A re-sent call that deduplicated a job: every job's answer from the call record (before).
local function replay_kept(ctx, jobs, reply, before)
  written_again(ctx)
  local out = {"BatchApplied", ""}
  for i, a in ipairs(jobs) do
    local kept = before[i]
    local own = kept == true or kept[1] == REVISED[1] -- (else answered by job kept[2])
    local id = own and a.id or kept[2]
    local h = load_job(ctx, id)
    if h then
      local item = job_out(ctx, id, h, reply, false)
      out[#out + 1] = own and item or {item}
    end
  end
  return out
end

local function replay_all(ctx, jobs, reply)
  written_again(ctx)
  local out = {"BatchApplied", ""}
  for _, a in ipairs(jobs) do
    local h = load_job(ctx, a.id)
    if h then out[#out + 1] = job_out(ctx, a.id, h, reply, false) end
  end
  return out
end

-- A plain job: one that writes only its hash, its queue's indexes (by state and deadline), the
-- namespace's sequence and queue set, its wake-up and its event; no dependency, dedup key,
-- batch or flow group.
local function plain(a)
  return a.dependencies == "" and a.dedup == "" and a.batch == "" and a.group == ""
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return refuse("BatchRefused", "1", e) end
  local limits = {payload = tonumber(args[3]), deps = tonumber(args[4]), ints = {},
    stages = {}, now_text = fmt(ctx, now), listed = {}, taken = {}}
  local n, mode, reply = int(args[5]), args[6], args[7]
  if n == nil or n < 1 or #args ~= 7 + n * GROUP
      or (mode ~= "all" and mode ~= "each" and mode ~= "skip")
      or (reply ~= "ids" and reply ~= "slim") then
    return refuse("BatchRefused", "1", invalid("malformed enqueue call"))
  end
  local jobs, dedup = {}, mode == "skip"
  for i = 1, n do
    local a = read_group(args, i)
    jobs[i] = a
    dedup = dedup or a.dedup ~= ""
  end
  limits.skip = mode == "skip"
  limits.none_exist = none_exist(ctx, jobs)
  limits.each = mode == "each"
  -- One plain job that does not exist (fast declined it): no re-sent call of it applied it. In
  -- "each" mode one that refused it left no record to read: a plain job's refusals depend on its
  -- arguments and on its keys' types alone, so a re-sent call is refused again, or applies.
  if n == 1 and limits.none_exist and plain(jobs[1]) then
    return (limits.each and enqueue_each or enqueue_all)(ctx, jobs, now, limits, reply, NO_DEPS)
  end
  if mode == "each" then
    -- A re-sent call: its record (some job was refused), or its first job found (all applied).
    -- Otherwise no job of this call can exist yet, and none is looked for.
    local before = decode_items(recorded(ctx))
    limits.resent = #before > 0 or (not limits.none_exist and created_by(ctx, jobs[1]) ~= nil)
    if limits.resent then written_again(ctx) end
    local out, kept = enqueue_each(ctx, jobs, now, limits, reply, before)
    if kept then record(ctx, kept) end
    return out
  end
  -- A call that may deduplicate or supersede a job may have left a record of its answers (none
  -- supersedes when no job of the call exists).
  if dedup or not limits.none_exist then
    local before = decode_items(recorded(ctx))
    if #before > 0 then return replay_kept(ctx, jobs, reply, before) end
  end
  -- (none_exist: not even the first job, so this is no re-sent call; nothing more to read)
  if not limits.none_exist and created_by(ctx, jobs[1]) then return replay_all(ctx, jobs, reply) end
  local out, kept = enqueue_all(ctx, jobs, now, limits, reply)
  if kept then record(ctx, kept) end
  return out
end

return run_call(KEYS, ARGV, main)
