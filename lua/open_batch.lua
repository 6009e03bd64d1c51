-- open_batch: a new batch (docs/workflows.md, "Batches"), open, with no member yet and its
-- callbacks: each of on_success, on_failure, on_complete optional, a job spec checked here as
-- enqueue.lua checks a job (its check_one), so that firing it later is rarely refused.
-- Opening a batch that exists with the same callbacks is answered "0" (it was there) and changes
-- nothing, closed or not; with other callbacks it is refused BatchExists.
-- Checks, in order: InvalidJob (now, the batch id, a malformed call); the types of the batch's
-- keys (CorruptKey); each callback's job as enqueue checks it (InvalidJob, DuplicateJob of its
-- id "<batch>@<kind>", CorruptKey); then BatchExists.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] batch id
-- ARGV[4]  max payload bytes
-- then 3 groups of 6, on_success, on_failure, on_complete: given ("1" | ""), queue, stage,
--   payload, priority, max_attempts
--
-- Replies
--   {"BatchOpened", now, fresh}   fresh: "1" this call made it, "0" it existed with the same
--                                 callbacks
--   {"BatchExists", id} | {"InvalidJob", reason} | {"DuplicateJob", id} | {"CorruptKey", key,
--   reason} | {"CorruptJob", id, reason}
-- A re-sent call (same call id) gets the first delivery's answer again, now "".

-- uses: core, call, batches, enqueue
local applied, clock, fmt, invalid = Core.applied, Core.clock, Core.fmt, Core.invalid
local key_batch, refuse = Core.key_batch, Core.refuse
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local batch_id_error, batch_types_error = Batches.batch_id_error, Batches.batch_types_error
local CALLBACKS, SPEC = Batches.CALLBACKS, Batches.SPEC
local check_one, job_args = Enqueue.check_one, Enqueue.job_args

-- The callbacks sent: {k = {q, s, p, pr, m}} for each kind given, or nil and a refusal.
local function read_specs(ctx)
  local args, specs = ctx.args, {}
  if #args ~= 4 + 3 * 6 or tonumber(args[4]) == nil then
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

-- Each callback's job checked as enqueue checks one: nil, or the first refusal.
local function specs_error(ctx, id, specs, now)
  for _, kind in ipairs(CALLBACKS) do
    local spec = specs[kind[1]]
    if spec then
      local a = job_args({id = id .. "@" .. kind[2], queue = spec[1], stage = spec[2],
        payload = spec[3], priority = spec[4], max_attempts = spec[5]})
      local limits = {payload = tonumber(ctx.args[4]), deps = 0, ints = {}, stages = {},
        listed = {}, now_text = fmt(ctx, now), none_exist = false}
      local bad = check_one(ctx, a, now, limits, {})
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
  local k = key_batch(ctx, id)
  if redis.call("EXISTS", k) == 1 then
    if not same_specs(ctx, id, specs) then return refuse("BatchExists", id) end
    record(ctx, "0")
    return applied("BatchOpened", fmt(ctx, now), "0")
  end
  bad = specs_error(ctx, id, specs, now)
  if bad then return bad end
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
  redis.call("HSET", k, unpack(fields))
  record(ctx, "1")
  return applied("BatchOpened", fmt(ctx, now), "1")
end

return run_call(KEYS, ARGV, main)
