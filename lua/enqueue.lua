-- enqueue: (nothing) -> Waiting(available_at), for one job or a batch of jobs, all or nothing.
-- The seed's new_job checks, in its order, then our limits, then DuplicateJob, then each
-- dependency: MissingDependency when it does not exist (nor earlier in this batch),
-- IncompleteDependency when it can never succeed (Cancelled, or Failed for a job that asked to be
-- cancelled on dependency failure). A job may depend on an earlier job of the same batch.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id          ARGV[2] now ("" = server clock)
-- ARGV[3]  max payload bytes ARGV[4] max dependencies per job  ARGV[5] job count N
-- then N groups of 12: id, queue, stage, payload, input_ref, input_revision,
--   dependencies (space-separated ids), priority, max_attempts, available_at ("" = now + delay),
--   delay ("" = 0), on_dependency_failure ("block" | "cancel").
--
-- Replies
--   {"BatchApplied", now, job...}            each job as {id, field, value, ...}
--   {"BatchRefused", index, {refusal...}}    index is 1-based within the batch
--   refusal: InvalidJob(reason) | DuplicateJob(id) | MissingDependency(id) |
--            IncompleteDependency(id) | CorruptJob(id, reason) | CorruptKey(key, reason)
-- A re-sent call (same call id) gets BatchApplied again, with the jobs as they are now.

local GROUP = 12

local function seed_checks(a, now)
  if a.id == "" then return invalid("id must not be empty") end
  if a.stage == "" then return invalid("stage must not be empty") end
  if a.input_ref == "" then return invalid("input_ref must not be empty") end
  local rv, e1 = int_arg(a.input_revision, "input_revision")
  if rv == nil then return e1 end
  if rv < 0 then return invalid("input_revision must be nonnegative") end
  local m, e2 = int_arg(a.max_attempts, "max_attempts")
  if m == nil then return e2 end
  if m < 1 then return invalid("max_attempts must be positive") end
  local at
  if a.available_at ~= "" then
    local e3
    at, e3 = int_arg(a.available_at, "available_at")
    if at == nil then return e3 end
    if at < 0 then return invalid("available_at must be nonnegative") end
  else
    local delay, e4 = int_arg(a.delay == "" and "0" or a.delay, "delay")
    if delay == nil then return e4 end
    if delay < 0 then return invalid("delay must be nonnegative") end
    at = now + delay
  end
  a.at = at
  return nil
end

local function limit_checks(a, max_payload, max_deps)
  local bad = id_error(a.id, "id") or name_error(a.queue, "queue") or stage_error(a.stage)
    or text_error(a.input_ref, "input_ref")
  if bad then return bad end
  if #a.payload > max_payload then
    return invalid("payload is " .. #a.payload .. " bytes, over the limit of " .. max_payload)
  end
  local pr, e = int_arg(a.priority, "priority")
  if pr == nil then return e end
  if pr < PRIORITY_MIN or pr > PRIORITY_MAX then
    return invalid("priority must be between " .. PRIORITY_MIN .. " and " .. PRIORITY_MAX)
  end
  if a.odf ~= "block" and a.odf ~= "cancel" then
    return invalid("on_dependency_failure must be 'block' or 'cancel'")
  end
  a.deps = split(a.dependencies)
  if #a.deps > max_deps then
    return invalid("a job may have at most " .. max_deps .. " dependencies")
  end
  local seen = {}
  for _, d in ipairs(a.deps) do
    if seen[d] then return invalid("dependency " .. d .. " is listed twice") end
    seen[d] = true
  end
  return nil
end

-- Counts the dependencies not yet succeeded; refuses those that cannot ever succeed.
local function dependency_checks(a, batch)
  local pending = 0
  for _, d in ipairs(a.deps) do
    if batch[d] then
      pending = pending + 1
    else
      local h, err = load_job(d)
      if h == nil then
        if err[1] == "MissingJob" then return nil, refuse("MissingDependency", d) end
        return nil, err
      end
      if h.st == "C" or (h.st == "F" and a.odf == "cancel") then
        return nil, refuse("IncompleteDependency", d)
      end
      if h.st ~= "S" then pending = pending + 1 end
    end
  end
  return pending
end

local function read_group(i)
  local b = 5 + (i - 1) * GROUP
  return {
    id = ARGV[b + 1], queue = ARGV[b + 2], stage = ARGV[b + 3], payload = ARGV[b + 4],
    input_ref = ARGV[b + 5], input_revision = ARGV[b + 6], dependencies = ARGV[b + 7],
    priority = ARGV[b + 8], max_attempts = ARGV[b + 9], available_at = ARGV[b + 10],
    delay = ARGV[b + 11], odf = ARGV[b + 12],
  }
end

local function replay(jobs)
  local out = {"BatchApplied", ""}
  for _, a in ipairs(jobs) do
    local h = load_job(a.id)
    if h then out[#out + 1] = job_reply(a.id, h) end
  end
  return out
end

local function check_all(jobs, now, max_payload, max_deps)
  local batch, queues = {}, {}
  for i, a in ipairs(jobs) do
    local bad = seed_checks(a, now) or limit_checks(a, max_payload, max_deps)
    if bad then return refuse("BatchRefused", fmt(i), bad) end
    if batch[a.id] or redis.call("EXISTS", key_job(a.id)) == 1 then
      return refuse("BatchRefused", fmt(i), refuse("DuplicateJob", a.id))
    end
    local pending, err = dependency_checks(a, batch)
    if pending == nil then return refuse("BatchRefused", fmt(i), err) end
    a.pending = pending
    batch[a.id] = true
    if not queues[a.queue] then
      queues[a.queue] = true
      local badkey = check_queue(a.queue)
      if badkey then return refuse("BatchRefused", fmt(i), badkey) end
    end
  end
  local badkey = check_types({KEY_SEQ}, "string")
  if badkey then return refuse("BatchRefused", "1", badkey) end
  return nil, queues
end

local function write_all(jobs, now)
  local seq = redis.call("INCRBY", KEY_SEQ, #jobs) - #jobs
  local out = {"BatchApplied", fmt(now)}
  for i, a in ipairs(jobs) do
    local h = {
      q = a.queue, s = a.stage, p = a.payload, ir = a.input_ref, rv = a.input_revision,
      dp = table.concat(a.deps, " "), pd = fmt(a.pending), odf = a.odf, pr = a.priority,
      sq = fmt(seq + i), a = "0", m = a.max_attempts, f = "0", st = "W", at = fmt(a.at),
      ins = fmt(now),
    }
    create(a.id, h)
    place(a.id, h, now)
    emit(a.id, h, "enqueued")
    for _, d in ipairs(a.deps) do redis.call("SADD", key_dependents(d), a.id) end
    out[#out + 1] = job_reply(a.id, h)
  end
  return out
end

local function main()
  local cid = ARGV[1]
  local now, e = clock(ARGV[2])
  if now == nil then return refuse("BatchRefused", "1", e) end
  local max_payload, max_deps, n = tonumber(ARGV[3]), tonumber(ARGV[4]), int(ARGV[5])
  if n == nil or n < 1 or #ARGV ~= 5 + n * GROUP then
    return refuse("BatchRefused", "1", invalid("malformed enqueue call"))
  end
  local jobs = {}
  for i = 1, n do jobs[i] = read_group(i) end
  if recorded(cid) then return replay(jobs) end
  local bad, queues = check_all(jobs, now, max_payload, max_deps)
  if bad then return bad end
  for q in pairs(queues) do redis.call("SADD", KEY_QUEUES, q) end
  local out = write_all(jobs, now)
  record(cid, "A")
  return out
end

return finish(main())
