-- flow_control.lua: a queue's flow control (docs/flow-control.md): groups that take turns, rate limits
-- and concurrency caps, per queue and per group. The keys, each under the queue's (key_q):
--   flow     hash  the queue's limits and state: rate "<n> <window ms> <burst>", cap, grate and
--                  gcap (every group's default rate and cap), tat (the queue rate's theoretical
--                  arrival time, in µs), turn (turns given so far), uturn (the turn of the
--                  queue's jobs without a group). It exists once the queue has a limit or has had
--                  a grouped job: a claim of a queue without it goes as before (one HGETALL).
--   groups   zset  the groups with ready jobs that may start, by their turn (lowest first)
--   gwait    zset  the groups with ready jobs held by their rate (or a hold) until a time (ms)
--   gfull    set   the groups with ready jobs held at their concurrency cap
--   gactive  hash  group -> its leased jobs, counted once the queue has had a group cap (the
--                  flow's field counts: set_limits.lua counts the leases running then)
--   glimits  hash  group -> its own limits "<rate>|<cap>", each "" (the queue's default for
--                  its groups), "none" (no limit) or a value
--   gtat:<group>  string  the group's rate's theoretical arrival time (µs), expiring when it
--                  is past (so a group that no longer starts jobs leaves nothing behind)
--   gready:<group>  zset  the group's ready jobs, as ready holds them (score: priority)
-- A grouped job is in ready too (so that counts, lists and pages read one index), scored
-- priority + GROUPED: the queue's jobs without a group come first there, and a claim finds them
-- at its head. A group is in at most one of groups, gwait and gfull; one with no ready job left
-- is dropped from groups when its turn comes.
--
-- Rates are a generic cell rate algorithm: n starts per window w (ms) is one start every
-- T = ceil(w * 1000 / n) µs, and a burst b lets b more start at once (tolerance b * T). Times
-- are whole ms, so a rate of more than one start a ms lets the starts of one ms go at once
-- (tolerance + 1000 - T): in any window of w ms (starts stamped in ms) at most n + b start.
-- A hold (a release with a hold: the task was told to slow down) is kept apart from the rate:
-- the queue's in its flow's field hold, a group's in ghold:<group>, each the hold's end (ms).

-- uses: core, checks, index, events
local fmt, int, key_q, NONE, num = Core.fmt, Core.int, Core.key_q, Core.NONE, Core.num
local check_types = Checks.check_types
local zadd, zrem = Index.zadd, Index.zrem
local wake = Events.wake

local GROUPED = 10000000 -- added to a grouped job's priority in ready and delayed_pr
local GROUPED_MIN = 5000000 -- a score of ready at or past it is a grouped job's

local function key_gready(ctx, q, g) return key_q(ctx, q, "gready:" .. g) end
local function key_gtat(ctx, q, g) return key_q(ctx, q, "gtat:" .. g) end
local function key_ghold(ctx, q, g) return key_q(ctx, q, "ghold:" .. g) end

-- Refusal when a key of q's flow has another type (someone wrote it by hand); the group keys of
-- group g too, when given. Once a call per key (check_types keeps them).
local FLOW_TYPES = {{"flow", "hash"}, {"groups", "zset"}, {"gwait", "zset"}, {"gfull", "set"},
  {"gactive", "hash"}, {"glimits", "hash"}}
local function flow_error(ctx, q, g)
  for _, kt in ipairs(FLOW_TYPES) do
    local bad = check_types(ctx, {key_q(ctx, q, kt[1])}, kt[2])
    if bad then return bad end
  end
  if g == nil then return nil end
  return check_types(ctx, {key_gready(ctx, q, g)}, "zset")
    or check_types(ctx, {key_gtat(ctx, q, g), key_ghold(ctx, q, g)}, "string")
end

-- A group's rate's arrival time (µs; 0 when none is stored), and its write at the call's
-- `now` (ms): it expires a while after it is past (KEEP_MS), when it no longer holds anything
-- back. The expiry is relative to now (PX), not absolute, with room: a call given its own now (a
-- client's clock, a test's) must not see it vanish before its time.
local function group_tat(ctx, q, g)
  local v = redis.call("GET", key_gtat(ctx, q, g))
  return v and tonumber(v) or 0
end
local KEEP_MS = 60000
local function set_group_tat(ctx, q, g, tat, now)
  local ttl = math.max(1, math.ceil(tat / 1000) + 1 - now) + KEEP_MS
  redis.call("SET", key_gtat(ctx, q, g), fmt(ctx, tat), "PX", fmt(ctx, ttl))
end

-- A job's score in ready and delayed_pr.
local function ready_score(ctx, h)
  if h.g == nil then return h.pr end
  return fmt(ctx, num(h.pr) + GROUPED)
end

-- The flow state of the call (ctx.flows, made at the first use): groups that got ready jobs
-- (touched[q][g]) and the change of each group's leased jobs (deltas[q][g]; "" for the queue).
local function flows(ctx)
  local f = ctx.flows
  if f == nil then
    f = {touched = {}, deltas = {}}
    ctx.flows = f
  end
  return f
end

local function in_queue(t, q)
  local m = t[q]
  if m == nil then
    m = {}
    t[q] = m
  end
  return m
end

-- A job becomes ready (member: its entry, as ready_member makes it).
local function ready_add(ctx, q, h, member)
  if h.g == nil then
    zadd(ctx, key_q(ctx, q, "ready"), h.pr, member)
    return
  end
  zadd(ctx, key_q(ctx, q, "ready"), ready_score(ctx, h), member)
  zadd(ctx, key_gready(ctx, q, h.g), h.pr, member)
  in_queue(flows(ctx).touched, q)[h.g] = true
end

-- A grouped job enters another index (delayed, blocked): its queue has a flow from the call's
-- end on, so that a claim that makes the job ready takes turns with it.
local function grouped_waiting(ctx, q)
  in_queue(flows(ctx).touched, q)
end

local function ready_rem(ctx, q, h, member)
  zrem(ctx, key_q(ctx, q, "ready"), member)
  if h.g then zrem(ctx, key_gready(ctx, q, h.g), member) end
end

-- A lease of a job of q begins (d = 1) or ends (d = -1): counted for a grouped job (a job
-- without a group costs nothing: its queue's cap reads the leased index).
local function leases_changed(ctx, q, h, d)
  local g = h.g
  if g == nil then return end
  local deltas = in_queue(flows(ctx).deltas, q)
  deltas[g] = (deltas[g] or 0) + d
end

-- A group's leased jobs, this call's leases counted.
local function group_active(ctx, q, g)
  local stored = redis.call("HMGET", key_q(ctx, q, "gactive"), g)[1]
  local deltas = ctx.flows and ctx.flows.deltas[q]
  return (stored and tonumber(stored) or 0) + (deltas and deltas[g] or 0)
end

-- A rate "<n> <window ms> <burst>": its interval T and tolerance (µs), or nil.
local function rate_of(spec)
  if spec == nil or spec == "" or spec == "none" then return nil end
  local n, w, b = string.match(spec, "^(%d+) (%d+) (%d+)$")
  if n == nil then return nil end
  local t = math.ceil(tonumber(w) * 1000 / tonumber(n))
  return t, tonumber(b) * t + math.max(0, 1000 - t)
end

-- A group's own limits over the queue's defaults: its rate spec and its cap (or nil).
local function group_limits(ctx, q, fl, g)
  local rate, cap = fl.grate, fl.gcap
  local own = redis.call("HMGET", key_q(ctx, q, "glimits"), g)[1]
  if own then
    local r, c = string.match(own, "^(.-)|(.*)$")
    if r and r ~= "" then rate = r end
    if c and c ~= "" then cap = c end
  end
  return rate, (cap and cap ~= "none") and int(cap) or nil
end

-- When, at the earliest, a rate with arrival time tat (µs) lets a job start: µs.
local function allowed_at(tat, tolerance) return tat - (tolerance or 0) end

-- The ms of a µs time, rounded up (a time a claim is told to come back at).
local function ms_up(ctx, us) return fmt(ctx, math.ceil(us / 1000)) end

-- Puts group g of q in turn at `turn` unless it waits (gwait) or is held at its cap (gfull).
local function join(ctx, q, g, turn)
  if redis.call("ZSCORE", key_q(ctx, q, "gwait"), g) then return end
  if redis.call("SISMEMBER", key_q(ctx, q, "gfull"), g) == 1 then return end
  redis.call("ZADD", key_q(ctx, q, "groups"), "NX", turn, g)
end

-- The leases of q's groups that began (d > 0) or ended (d < 0) in this call, counted in
-- gactive (a queue counts them once a group cap was set: set_limits.lua); a group held at its
-- cap whose lease ended takes turns again, and the queue's idle workers are woken.
local function count_leases(ctx, q, deltas)
  local turn, full = nil, nil
  local k = key_q(ctx, q, "gactive")
  for g, d in pairs(deltas) do
    if d ~= 0 then
      if redis.call("HINCRBY", k, g, d) <= 0 then redis.call("HDEL", k, g) end
      if d < 0 and full == nil then full = redis.call("SCARD", key_q(ctx, q, "gfull")) > 0 end
      if d < 0 and full and redis.call("SREM", key_q(ctx, q, "gfull"), g) == 1 then
        turn = turn or redis.call("HINCRBY", key_q(ctx, q, "flow"), "turn", 0)
        redis.call("ZADD", key_q(ctx, q, "groups"), "NX", fmt(ctx, turn), g)
        wake(ctx, q)
      end
    end
  end
end

-- The call's end (call.lua's finish): the groups that got ready jobs join the turns, and the
-- leases of groups that began or ended are counted; a group held at its cap whose lease ended
-- takes turns again, and the queue's idle workers are woken. (A lease of a capped queue that
-- ends wakes none: the worker that ended it claims again itself, and idle workers come back by
-- the next_at they were told or their idle wait.)
local function flush_flow(ctx)
  local f = ctx.flows
  if f == nil then return end
  ctx.flows = nil
  for q, groups in pairs(f.touched) do
    local turn = fmt(ctx, redis.call("HINCRBY", key_q(ctx, q, "flow"), "turn", 0)) -- (made at 0)
    local held = redis.call("ZCARD", key_q(ctx, q, "gwait")) > 0
      or redis.call("SCARD", key_q(ctx, q, "gfull")) > 0
    for g in pairs(groups) do
      if held then
        join(ctx, q, g, turn)
      else
        redis.call("ZADD", key_q(ctx, q, "groups"), "NX", turn, g)
      end
    end
  end
  for q, deltas in pairs(f.deltas) do
    local changed = false
    for _, d in pairs(deltas) do
      if d ~= 0 then changed = true end
    end
    if changed and redis.call("HEXISTS", key_q(ctx, q, "flow"), "counts") == 1 then
      count_leases(ctx, q, deltas)
    end
  end
end

-- A hold of `ms` from now on the group g of q (or on the queue, g nil): no job of it starts
-- before then (a longer hold set before stays). A group taking turns waits in gwait meanwhile.
local function hold(ctx, q, g, now, ms)
  local k = key_q(ctx, q, "flow")
  redis.call("HINCRBY", k, "turn", 0) -- (the queue has a flow from now on)
  local till = now + ms
  if g == nil then
    local before = tonumber(redis.call("HMGET", k, "hold")[1] or "0") or 0
    if till > before then redis.call("HSET", k, "hold", fmt(ctx, till)) end
    return
  end
  local hk = key_ghold(ctx, q, g)
  local before = tonumber(redis.call("GET", hk) or "0") or 0
  if till > before then redis.call("SET", hk, fmt(ctx, till), "PX", fmt(ctx, ms + KEEP_MS)) end
  redis.call("HSET", k, "holds", "1") -- (claims read the groups' holds from now on)
  if redis.call("ZREM", key_q(ctx, q, "groups"), g) == 1 then
    redis.call("ZADD", key_q(ctx, q, "gwait"), fmt(ctx, math.max(till, before)), g)
  end
end

-- A group's hold's end (ms; 0: none).
local function group_hold(ctx, q, g)
  local v = redis.call("GET", key_ghold(ctx, q, g))
  return v and tonumber(v) or 0
end
