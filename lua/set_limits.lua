-- set_limits: change a queue's flow limits, or one group's (include/flow_control.lua), those named and
-- no other. Takes effect at the queue's next claim: a group held by a limit that changed takes
-- turns again (at most HELD_MAX of them a call; the others when their own wait or lease ends),
-- the changed rate starts afresh, and the queue's idle workers are woken.
-- Checks, in order: InvalidJob (the queue's name; the group, a job id's rule; each name and
-- value; a queue the namespace never had, unless declared); the types of the queue's flow keys
-- (CorruptKey); for the first group cap, at most COUNT_MAX leased jobs (InvalidJob): its
-- leases by group are counted then. Nothing is written before every check passed.
--
-- KEYS[1]  namespace prefix   KEYS[2] optional: the event stream (unused)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] queue
-- ARGV[4]  group ("" = the queue's own limits)
-- ARGV[5]  declare: "1" adds a queue the namespace never had (a worker declaring its app's
--          limits ahead of the first job), "" refuses it as unknown
-- then pairs of name, value: for a queue rate, cap, grate (every group's default rate), gcap
--   (every group's default cap); for a group rate, cap. A value is "" (no limit: for a group,
--   its queue's default), "none" (for a group only: no limit, whatever the default), a rate
--   "<n> <window ms> <burst>" (1 <= n <= window * 1000, 1 <= window <= 7 days, 0 <= burst <=
--   1,000,000) or a cap "<n>" (1..1,000,000).
--
-- Replies
--   {"LimitsSet", now}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) is answered from its record: nothing more changes (a second
-- delivery would start the rate afresh again and put held groups back in turn).

-- uses: core, checks, events, call, flow_control
local applied, clock, fmt, int, invalid = Core.applied, Core.clock, Core.fmt, Core.int, Core.invalid
local key_job, key_q, key_queues = Core.key_job, Core.key_q, Core.key_queues
local check_types, id_error, name_error = Checks.check_types, Checks.id_error, Checks.name_error
local wake = Events.wake
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local flow_error, key_gtat = FlowControl.flow_error, FlowControl.key_gtat

local WEEK_MS = 604800000
local LIMIT_MAX = 1000000
local HELD_MAX = 1000
local QUEUE_NAMES = {rate = "rate", cap = "cap", grate = "rate", gcap = "cap"}
local GROUP_NAMES = {rate = "rate", cap = "cap"}

-- The refusal of a value of kind "rate" or "cap" (group: whether "none" may be given), or nil.
local function value_error(kind, v, group, name)
  if v == "" or (v == "none" and group) then return nil end
  if kind == "cap" then
    local n = int(v)
    if n == nil or n < 1 or n > LIMIT_MAX then
      return invalid(name .. " must be a whole number between 1 and " .. LIMIT_MAX)
    end
    return nil
  end
  local n, w, b = string.match(v, "^(%d+) (%d+) (%d+)$")
  n, w, b = int(n), int(w), int(b)
  if n == nil or w == nil or b == nil then
    return invalid(name .. " must be '<limit> <window ms> <burst>'")
  end
  if w < 1 or w > WEEK_MS then return invalid(name .. "'s window must be 1 ms to 7 days") end
  if n < 1 or n > w * 1000 then
    return invalid(name .. "'s limit must be at least 1 and at most 1000 a ms")
  end
  if b > LIMIT_MAX then return invalid(name .. "'s burst must be at most " .. LIMIT_MAX) end
  return nil
end

-- The named values (ARGV[6..]) as a table, or nil and a refusal.
local function read_values(args, group)
  local names = group and GROUP_NAMES or QUEUE_NAMES
  local values = {}
  if (#args - 5) % 2 ~= 0 or #args < 7 then return nil, invalid("give at least one limit") end
  for i = 6, #args, 2 do
    local name, v = args[i], args[i + 1]
    local kind = names[name]
    if kind == nil then
      return nil, invalid("unknown limit '" .. name .. "'" .. (group and " of a group" or ""))
    end
    local bad = value_error(kind, v, group, name)
    if bad then return nil, bad end
    values[name] = v
  end
  return values
end

-- The queue's leased jobs by group, when a group cap is set for the first time (nil when its
-- leases are counted already): from then on every lease that begins or ends is counted
-- (include/flow_control.lua's count_leases). Or nil and a refusal past COUNT_MAX leases.
local COUNT_MAX = 100000
local function leases_by_group(ctx, queue)
  if redis.call("HEXISTS", key_q(ctx, queue, "flow"), "counts") == 1 then return nil end
  local leased = key_q(ctx, queue, "leased")
  if redis.call("ZCARD", leased) > COUNT_MAX then
    return nil, invalid("a group cap counts the queue's leased jobs when first set: at most "
      .. COUNT_MAX .. " may be leased then")
  end
  local counts = {}
  for _, id in ipairs(redis.call("ZRANGE", leased, "0", "-1")) do
    local g = redis.pcall("HMGET", key_job(ctx, id), "g") -- (a damaged job: no group)
    g = type(g) == "table" and not g.err and g[1]
    if g then counts[g] = (counts[g] or 0) + 1 end
  end
  return counts
end

-- Whether the values set a group cap (so that group leases must be counted).
local function sets_group_cap(values, group)
  local cap = group and values.cap or values.gcap
  return cap ~= nil and cap ~= "" and cap ~= "none"
end

-- Groups held in gwait and gfull take turns again (at most HELD_MAX of each): their limits
-- changed.
local function release_held(ctx, queue, turn)
  local groups = key_q(ctx, queue, "groups")
  local waiting = redis.call("ZRANGE", key_q(ctx, queue, "gwait"), "0", fmt(ctx, HELD_MAX - 1))
  local full = redis.call("SRANDMEMBER", key_q(ctx, queue, "gfull"), HELD_MAX)
  for _, g in ipairs(waiting) do
    redis.call("ZREM", key_q(ctx, queue, "gwait"), g)
    redis.call("ZADD", groups, "NX", turn, g)
  end
  for _, g in ipairs(full) do
    redis.call("SREM", key_q(ctx, queue, "gfull"), g)
    redis.call("ZADD", groups, "NX", turn, g)
  end
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local queue, group = args[3], args[4] ~= "" and args[4] or nil
  local bad = name_error(queue, "queue") or (group and id_error(group, "group"))
    or check_types(ctx, {key_queues(ctx)}, "set")
  if bad then return bad end
  local values, err = read_values(args, group)
  if values == nil then return err end
  local again = recorded(ctx)
  if again then return applied("LimitsSet", again) end
  bad = flow_error(ctx, queue, group) or check_types(ctx, {key_q(ctx, queue, "wake")}, "list")
    or check_types(ctx, {key_q(ctx, queue, "leased")}, "zset")
  if bad then return bad end
  local counts = nil
  if sets_group_cap(values, group) then
    counts, bad = leases_by_group(ctx, queue)
    if bad then return bad end
  end
  if redis.call("SISMEMBER", key_queues(ctx), queue) == 0 then
    if args[5] ~= "1" then
      return invalid("unknown queue '" .. queue .. "': nothing was ever enqueued to it")
    end
    redis.call("SADD", key_queues(ctx), queue)
  end
  local k = key_q(ctx, queue, "flow")
  redis.call("HSETNX", k, "turn", "0")
  local turn = redis.call("HGET", k, "turn")
  if counts then
    for g, n in pairs(counts) do redis.call("HSET", key_q(ctx, queue, "gactive"), g, fmt(ctx, n)) end
    redis.call("HSET", k, "counts", "1")
  end
  if group then
    local lk = key_q(ctx, queue, "glimits")
    local own = redis.call("HGET", lk, group) or "|"
    local rate, cap = string.match(own, "^(.-)|(.*)$")
    if values.rate then
      rate = values.rate
      redis.call("DEL", key_gtat(ctx, queue, group))
    end
    if values.cap then cap = values.cap end
    if (rate or "") == "" and (cap or "") == "" then
      redis.call("HDEL", lk, group)
    else
      redis.call("HSET", lk, group, (rate or "") .. "|" .. (cap or ""))
    end
    if redis.call("ZREM", key_q(ctx, queue, "gwait"), group) == 1
        or redis.call("SREM", key_q(ctx, queue, "gfull"), group) == 1 then
      redis.call("ZADD", key_q(ctx, queue, "groups"), "NX", turn, group)
    end
  else
    for name, v in pairs(values) do
      if v == "" then redis.call("HDEL", k, name) else redis.call("HSET", k, name, v) end
    end
    if values.rate then redis.call("HDEL", k, "tat") end
    if values.grate or values.gcap then release_held(ctx, queue, turn) end
  end
  wake(ctx, queue)
  record(ctx, fmt(ctx, now))
  return applied("LimitsSet", fmt(ctx, now))
end

return run_call(KEYS, ARGV, main)
