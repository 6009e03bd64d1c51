-- flow (read only): a queue's flow (include/flow_control.lua): its limits, what holds it back now, and
-- its groups, those taking turns, those waiting on their rate or a hold, and those at their
-- cap, each with its ready and leased jobs and its own limits. At most `limit` groups of each of
-- the three, in the order they hold them (turn, wait's end, any); or the one group asked for.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] queue
-- ARGV[4]  limit: groups listed of each kind (0..1000)   ARGV[5] group ("" = the first ones)
--
-- Replies
--   {"Flow", now, rate, cap, grate, gcap, leased, ready_own, next_at, turns, waiting, full,
--    group...}
--     rate, grate: "<n> <window ms> <burst>" or ""; cap, gcap: "<n>" or ""; leased: the queue's
--     leased jobs; ready_own: its ready jobs without a group; next_at: when the queue's rate
--     (or a hold of the queue) lets the next job start, when that is after now (ms), else ""; turns, waiting, full: how
--     many groups are in each
--     group: {name, state ("turn" | "wait" | "full" | "idle"), ready, leased ("" until the
--     queue has had a group cap: its group leases are counted from then), until (ms: the
--     end of its wait, for a group waiting, else ""), own rate, own cap ("" = the default,
--     "none" = no limit)}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, checks, call, flow_control
local clock, fmt, int, invalid = Core.clock, Core.fmt, Core.int, Core.invalid
local key_q = Core.key_q
local check_types, id_error, name_error = Checks.check_types, Checks.id_error, Checks.name_error
local run_call = Call.run_call
local allowed_at, flow_error, GROUPED_MIN = FlowControl.allowed_at, FlowControl.flow_error, FlowControl.GROUPED_MIN
local key_gready, ms_up, rate_of = FlowControl.key_gready, FlowControl.ms_up, FlowControl.rate_of

local function group_row(ctx, queue, g, state, counted)
  local own = redis.call("HGET", key_q(ctx, queue, "glimits"), g) or "|"
  local rate, cap = string.match(own, "^(.-)|(.*)$")
  local until_at = ""
  if state == "wait" then
    until_at = redis.call("ZSCORE", key_q(ctx, queue, "gwait"), g) or ""
  end
  return {g, state, fmt(ctx, redis.call("ZCARD", key_gready(ctx, queue, g))),
    counted and (redis.call("HGET", key_q(ctx, queue, "gactive"), g) or "0") or "", until_at,
    rate or "", cap or ""}
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local queue, limit, group = args[3], int(args[4]), args[5] ~= "" and args[5] or nil
  local bad = name_error(queue, "queue") or (group and id_error(group, "group"))
  if bad then return bad end
  if limit == nil or limit < 0 or limit > 1000 then
    return invalid("limit must be between 0 and 1000")
  end
  bad = flow_error(ctx, queue, group)
    or check_types(ctx, {key_q(ctx, queue, "leased"), key_q(ctx, queue, "ready")}, "zset")
  if bad then return bad end
  local raw = redis.call("HGETALL", key_q(ctx, queue, "flow"))
  local fl = {}
  for i = 1, #raw, 2 do fl[raw[i]] = raw[i + 1] end
  local next_at = ""
  local _, tolerance = rate_of(fl.rate)
  local tat = tonumber(fl.tat or "0") or 0
  local at = math.max(tat > 0 and allowed_at(tat, tolerance) or 0,
    (tonumber(fl.hold or "0") or 0) * 1000)
  if at > now * 1000 then next_at = ms_up(ctx, at) end
  local out = {"Flow", fmt(ctx, now), fl.rate or "", fl.cap or "", fl.grate or "", fl.gcap or "",
    fmt(ctx, redis.call("ZCARD", key_q(ctx, queue, "leased"))),
    fmt(ctx, redis.call("ZCOUNT", key_q(ctx, queue, "ready"), "-inf", "(" .. GROUPED_MIN)),
    next_at,
    fmt(ctx, redis.call("ZCARD", key_q(ctx, queue, "groups"))),
    fmt(ctx, redis.call("ZCARD", key_q(ctx, queue, "gwait"))),
    fmt(ctx, redis.call("SCARD", key_q(ctx, queue, "gfull")))}
  if group then
    local state = "idle"
    if redis.call("ZSCORE", key_q(ctx, queue, "groups"), group) then state = "turn"
    elseif redis.call("ZSCORE", key_q(ctx, queue, "gwait"), group) then state = "wait"
    elseif redis.call("SISMEMBER", key_q(ctx, queue, "gfull"), group) == 1 then state = "full" end
    out[#out + 1] = group_row(ctx, queue, group, state, fl.counts)
    return out
  end
  if limit > 0 then
    local last = fmt(ctx, limit - 1)
    for _, g in ipairs(redis.call("ZRANGE", key_q(ctx, queue, "groups"), "0", last)) do
      out[#out + 1] = group_row(ctx, queue, g, "turn", fl.counts)
    end
    for _, g in ipairs(redis.call("ZRANGE", key_q(ctx, queue, "gwait"), "0", last)) do
      out[#out + 1] = group_row(ctx, queue, g, "wait", fl.counts)
    end
    for _, g in ipairs(redis.call("SRANDMEMBER", key_q(ctx, queue, "gfull"), limit)) do
      out[#out + 1] = group_row(ctx, queue, g, "full", fl.counts)
    end
  end
  return out
end

return run_call(KEYS, ARGV, main)
