-- open_batch: a new batch (docs/workflows.md, "Batches"), open, with its callbacks: each of
-- on_success, on_failure, on_complete optional, a job spec checked here as enqueue.lua checks a
-- job (its check_one), so that firing it later is rarely refused. Optionally in the same call,
-- all or nothing: its first members, enqueued as enqueue.lua enqueues a batch of jobs, and its
-- close (close_batch.lua): so a batch that fits one call is made whole at once.
-- Opening a batch that exists with the same callbacks is answered "0" (it was there) and changes
-- nothing, closed or not (no job is enqueued); with other callbacks it is refused BatchExists.
-- Checks, in order: InvalidJob (now, the batch id, a malformed call); the types of the batch's
-- keys (CorruptKey); then BatchExists; each callback's job as enqueue checks it (InvalidJob,
-- DuplicateJob of its id "<batch>@<kind>", CorruptKey); each member as enqueue checks it, in
-- order (a member of another batch: InvalidJob).
--
-- KEYS[1]  namespace prefix   KEYS[2] optional: the event stream
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] batch id
-- ARGV[4]  max payload bytes
-- ARGV[5..22]  3 groups of 6, on_success, on_failure, on_complete: given ("1" | ""), queue,
--   stage, payload, priority, max_attempts
-- ARGV[23] close: "1" | ""   ARGV[24] max dependencies per job   ARGV[25] member count N
-- then N groups of enqueue.lua's job arguments (its read_group), each with this batch's id
--
-- Replies
--   {"BatchOpened", now, fresh}   fresh: "1" this call made it (and its members), "0" it existed
--                                 with the same callbacks
--   {"BatchRefused", index, {refusal...}}   member `index` (1-based) refused as enqueue refuses
--   {"BatchExists", id} | {"InvalidJob", reason} | {"DuplicateJob", id} | {"CorruptKey", key,
--   reason} | {"CorruptJob", id, reason}
-- A re-sent call (same call id) gets the first delivery's answer again, now "".

-- uses: core, call, batches, enqueue, callbacks
local applied, clock, fmt, int, invalid = Core.applied, Core.clock, Core.fmt, Core.int, Core.invalid
local key_batch, key_queues, key_seq, refuse = Core.key_batch, Core.key_queues, Core.key_seq, Core.refuse
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local batch_id_error, batch_types_error = Batches.batch_id_error, Batches.batch_types_error
local CALLBACKS, SPEC = Batches.CALLBACKS, Batches.SPEC
local check_one, job_args, none_exist = Enqueue.check_one, Enqueue.job_args, Enqueue.none_exist
local read_group, write_one = Enqueue.read_group, Enqueue.write_one
local fire_due = Callbacks.fire_due

local HEAD = 25 -- the arguments before the first member's
local ITEM = 18 -- a member's (enqueue.lua's GROUP)

-- The callbacks sent: {k = {q, s, p, pr, m}} for each kind given, or nil and a refusal.
local function read_specs(ctx)
  local args, specs = ctx.args, {}
  local n = int(args[25] or "")
  if n == nil or n < 0 or #args ~= HEAD + n * ITEM or tonumber(args[4]) == nil
      or tonumber(args[24]) == nil or (args[23] ~= "1" and args[23] ~= "") then
    return nil, invalid("malformed open_batch call")
  end
  for i, kind in ipairs(CALLBACKS) do
    local b = 4 + (i - 1) * 6
    if args[b + 1] == "1" then
      specs[kind[1]] = {args[b + 2], args[b + 3], args[b + 4], args[b + 5], args[b + 6]}
    elseif args[b + 1] ~= "" then
      return nil, invalid("malformed open_batch call")
    end
  end
  return specs
end

-- The checks of enqueue's check_one, as a call of enqueue.lua would make them.
local function limits_of(ctx, now)
  return {payload = tonumber(ctx.args[4]), deps = tonumber(ctx.args[24]), ints = {},
    stages = {}, listed = {}, taken = {}, now_text = fmt(ctx, now), none_exist = false}
end

-- Each callback's job checked as enqueue checks one: nil, or the first refusal.
local function specs_error(ctx, id, specs, now)
  for _, kind in ipairs(CALLBACKS) do
    local spec = specs[kind[1]]
    if spec then
      local a = job_args({id = id .. "@" .. kind[2], queue = spec[1], stage = spec[2],
        payload = spec[3], priority = spec[4], max_attempts = spec[5]})
      local bad = check_one(ctx, a, now, limits_of(ctx, now), {})
      if bad then return bad end
    end
  end
  return nil
end

-- Whether the stored batch has exactly these callbacks.
local function same_specs(ctx, id, specs)
  local k = key_batch(ctx, id)
  for _, kind in ipairs(CALLBACKS) do
    local spec, fields = specs[kind[1]], {}
    for i, f in ipairs(SPEC) do fields[i] = kind[1] .. "." .. f end
    local stored = redis.call("HMGET", k, unpack(fields))
    for i = 1, #SPEC do
      if (stored[i] or nil) ~= (spec and spec[i] or nil) then return false end
    end
  end
  return true
end

-- The members sent, checked as enqueue checks a batch of jobs (the batch taken as open: it is
-- written with them): the jobs, or nil, the index of the first refused and its refusal.
local function members(ctx, id, now)
  local args, jobs, shifted = ctx.args, {}, {}
  for i = HEAD + 1, #args do shifted[i - HEAD + 7] = args[i] end -- (read_group's layout)
  for i = 1, tonumber(args[25]) do jobs[i] = read_group(shifted, i) end
  ctx.checked["batch " .. id] = true -- (join_error: found open)
  local limits, batch = limits_of(ctx, now), {}
  limits.none_exist = none_exist(ctx, jobs)
  for i, a in ipairs(jobs) do
    local bad = (a.batch ~= id and invalid("a member of open_batch joins its batch"))
      or check_one(ctx, a, now, limits, batch)
    if bad then return nil, i, bad end
    batch[a.id] = true
  end
  return jobs
end

local function write_batch(ctx, id, specs, now)
  local fields = {"n", "0", "cl", "0", "ct", fmt(ctx, now)}
  for _, kind in ipairs(CALLBACKS) do
    local spec = specs[kind[1]]
    for i, f in ipairs(SPEC) do
      if spec then
        fields[#fields + 1] = kind[1] .. "." .. f
        fields[#fields + 1] = spec[i]
      end
    end
  end
  redis.call("HSET", key_batch(ctx, id), unpack(fields))
end

local function write_members(ctx, jobs, now)
  if #jobs == 0 then return end
  local seq = redis.call("INCRBY", key_seq(ctx), fmt(ctx, #jobs)) - #jobs
  local queues, now_text = {}, fmt(ctx, now)
  for _, a in ipairs(jobs) do
    if not queues[a.queue] then
      redis.call("SADD", key_queues(ctx), a.queue)
      queues[a.queue] = true
    end
  end
  for i, a in ipairs(jobs) do write_one(ctx, a, now, seq + i, now_text) end
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local id = args[3] or ""
  local specs, err = read_specs(ctx)
  local bad = err or batch_id_error(id) or batch_types_error(ctx, id)
  if bad then return bad end
  local again = recorded(ctx)
  if again then return applied("BatchOpened", "", again) end
  if redis.call("EXISTS", key_batch(ctx, id)) == 1 then
    if not same_specs(ctx, id, specs) then return refuse("BatchExists", id) end
    record(ctx, "0")
    return applied("BatchOpened", fmt(ctx, now), "0")
  end
  bad = specs_error(ctx, id, specs, now)
  if bad then return bad end
  local jobs, index, refused = members(ctx, id, now)
  if jobs == nil then return refuse("BatchRefused", fmt(ctx, index), refused) end
  write_batch(ctx, id, specs, now)
  write_members(ctx, jobs, now)
  record(ctx, "1")
  local reply = applied("BatchOpened", fmt(ctx, now), "1")
  if args[23] ~= "1" then return reply end
  redis.call("HSET", key_batch(ctx, id), "cl", "1", "ca", fmt(ctx, now))
  ctx.batches = {[id] = true} -- (an empty batch fires at its close)
  return fire_due(ctx, reply, now)
end

return run_call(KEYS, ARGV, main)
