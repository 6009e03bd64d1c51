-- claim: Waiting / RetryWaiting (due, dependencies met) -> Leased, by queue, up to `limit` jobs.
-- Best first: lowest priority value, then earliest available_at, then enqueue order. Before it
-- picks, it promotes the best due scheduled jobs of the queue (promote_due.lua's promote_best:
-- however many came due, the `limit` best of them, priority by priority), then the earliest due
-- ones (promote_queue), and expires run-out leases of the queue (sweep_expired.lua's expire_queue), all
-- bounded and on this queue only; it never offers a job a claim by id would refuse. The bounds
-- and what they allow are in docs/lifecycle.md ("Best first, and its bounds").
-- Checks, in order: InvalidJob (worker, lease duration, queue name, limit); QueuePaused while
-- the queue is paused (pause.lua: nothing is promoted, expired or leased then); then the keys the
-- claim writes (CorruptKey); then, job by job from the head of the ready index, the job itself
-- (a damaged one is skipped) and the keys its own move writes. A job never started whose
-- deadline has come is expired instead (Waiting -> Expired, as sweep_expired.lua expires it).
-- The edge is claim_queue below; report_and_claim.lua claims with it too, after its outcomes.
-- A claim of plain jobs with no due work before them is made by plain_claim.lua's fast,
-- registered before main: main makes the calls it declines, and every other.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] queue   ARGV[4] worker id
-- ARGV[5]  lease duration ms   ARGV[6] limit (1..1000)
--
-- Replies
--   {"ClaimsApplied", now, id, fields, id, fields, ...}   each leased job as its id and its
--                                     fields as they were before the lease ({field, value, ...},
--                                     as HGETALL gives them): the client applies the lease, which
--                                     is fully known to it (st "L", a + 1, f + 1, w = worker,
--                                     x = now + lease duration, n = "<call id>.<i>" for the i-th
--                                     job, att = now); the token is id, rv, w, f, x, n
--   {"ClaimsApplied", "", {"Claim", job, token}...}   a re-sent call: token = {job_id,
--                                     input_revision, worker, fence, expires_at, nonce} as first
--                                     handed out (the job as it is now)
--   {"NothingClaimable", next_at}   next_at: when the next delayed job or lease comes due, or "";
--                                     now when it met REPAIR_MAX entries it could not lease
--   {"QueuePaused", queue}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason} | {"CorruptJob", id, reason}
-- The nonce of the i-th claim is "<call id>.<i>". A re-sent call (same call id) gets the claims
-- the first delivery made, with the same tokens, and leases nothing more.

-- uses: core, checks, index, job, call, lease, flow_control, promote_due, sweep_expired, callbacks, plain_claim
local clock, fmt, int, invalid = Core.clock, Core.fmt, Core.int, Core.invalid
local key_paused, key_q, num, pcall_typed = Core.key_paused, Core.key_q, Core.num, Core.pcall_typed
local refuse, split = Core.refuse, Core.split
local check_queue, duration_arg = Checks.check_queue, Checks.duration_arg
local name_error, text_error = Checks.name_error, Checks.text_error
local writes_error = Checks.writes_error
local zread, zread_typed, zrem = Index.zread, Index.zread_typed, Index.zrem
local blocked, load_job, place, ready_id = Job.blocked, Job.load_job, Job.place, Job.ready_id
local past_deadline, unplace = Job.past_deadline, Job.unplace
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local grant, lease, replayed_claim = Lease.grant, Lease.lease, Lease.replayed_claim
local token_record = Lease.token_record
local allowed_at, flow_error, group_active = FlowControl.allowed_at, FlowControl.flow_error, FlowControl.group_active
local group_limits, group_tat, GROUPED_MIN = FlowControl.group_limits, FlowControl.group_tat, FlowControl.GROUPED_MIN
local key_gready, ms_up, rate_of = FlowControl.key_gready, FlowControl.ms_up, FlowControl.rate_of
local group_hold, join = FlowControl.group_hold, FlowControl.join
local set_group_tat = FlowControl.set_group_tat
local promote_best, promote_queue = PromoteDue.promote_best, PromoteDue.promote_queue
local expire_queue, expire_unstarted = SweepExpired.expire_queue, SweepExpired.expire_unstarted
local fire_due = Callbacks.fire_due
local fast = PlainClaim.fast -- (a claim that needs none of the general way's work: see there)
local quiet = PlainClaim.quiet

local MAINTENANCE = 100
-- Entries of a ready index a claim drops, re-indexes or skips as damaged, at most (and, in a
-- flowed claim, turns that leased nothing): see claim_queue.
local REPAIR_MAX = 100

-- QueuePaused while `queue` is paused (pause.lua), or nil; CorruptKey when the paused set is no
-- set. One SISMEMBER: a claim of a queue never paused pays no more.
local function paused_error(ctx, queue)
  local k = key_paused(ctx)
  local paused = pcall_typed("SISMEMBER", k, queue)
  if paused == 0 then return nil end
  if paused == 1 then return refuse("QueuePaused", queue) end
  return refuse("CorruptKey", k, "holds a " .. redis.call("TYPE", k)["ok"] .. ", expected a set")
end

-- The checks of a claim's arguments (queue, worker, lease duration, limit at ARGV[base..]):
-- lease_ms and limit, or nil and a refusal.
local function claim_args(ctx, base)
  local args = ctx.args
  local queue, worker = args[base], args[base + 1]
  if worker == "" then return nil, invalid("worker_id must not be empty") end
  local lease_ms, e = duration_arg(args[base + 2], "lease_duration", 1)
  if lease_ms == nil then return nil, e end
  local bad = name_error(queue, "queue") or text_error(worker, "worker_id")
  if bad then return nil, bad end
  local limit = int(args[base + 3])
  if limit == nil or limit < 1 or limit > 1000 then
    return nil, invalid("limit must be between 1 and 1000")
  end
  return lease_ms, limit
end

-- A re-sent claim's reply from its record: "id fence expires_at nonce revision" for each claim,
-- in order.
local function claims_replayed(ctx, rec, worker)
  local out, f = {"ClaimsApplied", ""}, split(rec)
  for i = 1, #f, 5 do
    local id = f[i]
    local h = load_job(ctx, id)
    if h then
      local kept = {f[i + 1], f[i + 2], f[i + 3], f[i + 4]}
      out[#out + 1] = replayed_claim(ctx, id, h, worker, kept)
    end
  end
  return out
end

-- NothingClaimable's next_at: when the first job of delayed or lease of leased comes due, as
-- text, or "" when both are empty. firsts: their heads read WITHSCORES, when the caller has them.
local function next_due(ctx, queue, firsts)
  if firsts == nil then -- (both read, so type-checked, by the opening)
    firsts = {zread(ctx, "ZRANGE", key_q(ctx, queue, "delayed"), "0", "0", "WITHSCORES"),
      zread(ctx, "ZRANGE", key_q(ctx, queue, "leased"), "0", "0", "WITHSCORES")}
  end
  local best = nil
  for _, first in ipairs(firsts) do
    if first[2] then
      local at = tonumber(first[2])
      if best == nil or at < best then best = at end
    end
  end
  return best and fmt(ctx, best) or ""
end

-- The keys a lease writes, type-checked once a call per queue (see writes_error): a job from
-- the ready index goes to the leased one; a retrying job also leaves the retrying index.
local LEASE_WRITES = {"ready", "leased"}
local RETRY_LEASE_WRITES = {"ready", "leased", "retrying"}

-- One entry of a ready index (ready, or a group's gready: `index`) the claim meets: "leased"
-- when it leased the job (pick.out / pick.rec), "dropped" when it dropped or re-indexed the
-- entry (left behind by hand) or expired the job (its deadline came), "skipped" when the job is
-- damaged or its move would write a key of the wrong type (left as it is: pick.damaged keeps the
-- refusal, pick.skipped the id), "seen" for a job skipped so on an earlier pass.
local function take_member(ctx, pick, member, index)
  local queue, now, out, rec = pick.queue, pick.now, pick.out, pick.rec
  local id = ready_id(member)
  if pick.skipped[id] then return "seen" end
  local h, err = load_job(ctx, id)
  local bad = nil
  if h == nil and err[1] ~= "MissingJob" then
    bad = err
  elseif h == nil then
    zrem(ctx, key_q(ctx, queue, "ready"), member)
    if index then zrem(ctx, index, member) end
    return "dropped"
  elseif past_deadline(h, now) then
    -- Never started by its deadline: expired instead of leased (it may cascade: every index
    -- of the queue is checked), and counted against the budget as a dropped entry.
    bad = check_queue(ctx, h.q) or expire_unstarted(ctx, id, h, now)
    if bad == nil then return "dropped" end
  elseif (h.st == "W" or h.st == "R") and not blocked(h)
      and num(h.a) < num(h.m) and tonumber(h.at) <= now then
    bad = writes_error(ctx, h.q, h.st == "R" and RETRY_LEASE_WRITES or LEASE_WRITES)
    if bad == nil then
      local raw = ctx.loaded[id] -- the fields as loaded, before the lease (see the replies above)
      lease(ctx, id, h, pick.grant, ctx.args[1] .. "." .. fmt(ctx, #rec + 1), member)
      out[#out + 1] = id
      out[#out + 1] = raw
      rec[#rec + 1] = id .. " " .. token_record(h.f, h.x, h.n, h.rv)
      pick.h = h
      return "leased"
    end
  else
    -- Not claimable after all: an entry left behind by hand, or a clock that went back (a
    -- failover to a server whose clock is behind). Drop the entry; a live job is re-indexed
    -- where it belongs (delayed or blocked), one out of attempts stays visible as waiting.
    -- Rare, and it may write any index of the job's queue: all of them are checked.
    bad = check_queue(ctx, h.q)
    if bad == nil then
      zrem(ctx, key_q(ctx, queue, "ready"), member)
      if index then zrem(ctx, index, member) end
      if (h.st == "W" or h.st == "R") and num(h.a) < num(h.m) then
        unplace(ctx, id, h)
        place(ctx, id, h, now)
      end
      return "dropped"
    end
  end
  pick.damaged[#pick.damaged + 1] = bad
  pick.skipped[id] = true
  return "skipped"
end

-- Leases up to pick.limit jobs from the head of the ready index into pick.out / pick.rec;
-- returns how many index entries it dropped (left behind by hand) or skipped (take_member).
-- pick: the claim (see claim_queue).
local function take_some(ctx, pick, budget, ahead)
  local dropped = 0
  local members = zread(ctx, "ZRANGE", key_q(ctx, pick.queue, "ready"), "0",
    fmt(ctx, pick.limit - #pick.rec - 1 + ahead + #pick.damaged))
  for _, member in ipairs(members) do
    if #pick.rec >= pick.limit or dropped >= budget then break end
    local got = take_member(ctx, pick, member, nil)
    if got == "dropped" or got == "skipped" then dropped = dropped + 1 end
  end
  return dropped
end

-- The queue's flow (include/flow_control.lua) as a table of its fields, or nil: a queue that never had
-- a limit nor a grouped job has none, and is claimed as before.
local function flow_of(ctx, queue)
  local k = key_q(ctx, queue, "flow")
  local raw = pcall_typed("HGETALL", k)
  if raw.err then
    return nil, refuse("CorruptKey", k, "holds a " .. redis.call("TYPE", k)["ok"] .. ", expected a hash")
  end
  if #raw == 0 then return nil end
  local fl = {}
  for i = 1, #raw, 2 do fl[raw[i]] = raw[i + 1] end
  return fl
end

-- The members of a ready index a flowed claim reads past: those its buffered writes remove
-- (include/index.lua; they sit at the head: the claim takes heads in order), or nil when the
-- buffer also adds some (the index must be flushed and read again).
local function removed_ahead(ctx, key)
  local m = ctx.index and ctx.index[key]
  if m == nil then return 0 end
  local n = 0
  for _, score in pairs(m) do
    if score then return nil end
    n = n + 1
  end
  return n
end

-- The head of group g's ready jobs not yet met by this claim (t.skips[g]: those it skipped as
-- damaged), and whether another follows it; read past the buffered removals.
local function group_head(ctx, queue, g, t)
  local index, skip = key_gready(ctx, queue, g), t.skips[g] or 0
  local ahead = removed_ahead(ctx, index)
  local members, bad
  if ahead == nil then
    members, bad = zread_typed(ctx, "ZRANGE", index, fmt(ctx, skip), fmt(ctx, skip + 1))
  else -- (no flush: its buffered writes are read past)
    members = redis.pcall("ZRANGE", index, fmt(ctx, skip + ahead), fmt(ctx, skip + ahead + 1))
    if members.err then members, bad = zread_typed(ctx, "ZRANGE", index, "0", "0") end
  end
  if members == nil then return nil, false, index, bad end
  return members[1], members[2] ~= nil, index
end

-- The turns a flowed claim gives, written once per read of the turns (t.moved: group -> its new
-- turn as text, or false when it leaves them).
local function write_turns(ctx, queue, t)
  local added, removed = {}, {}
  for g, score in pairs(t.moved) do
    if score then
      added[#added + 1] = score
      added[#added + 1] = g
    else
      removed[#removed + 1] = g
    end
  end
  local groups = key_q(ctx, queue, "groups")
  if removed[1] then redis.call("ZREM", groups, unpack(removed)) end
  if added[1] then redis.call("ZADD", groups, unpack(added)) end
  t.moved = {}
end

-- A group's limits as this claim reads them: its rate (interval, tolerance), its cap, its rate's
-- arrival time (µs), its hold's end (µs). The group's own limits, arrival time and hold are read
-- only where one may apply (t.own_limits: the queue has groups with limits of their own;
-- fl.holds: a hold was ever set on one of its groups).
local function group_state(ctx, queue, fl, g, t)
  local rate, cap = fl.grate, int(fl.gcap or "")
  if t.own_limits then rate, cap = group_limits(ctx, queue, fl, g) end
  local interval, tolerance = rate_of(rate)
  local tat = interval and group_tat(ctx, queue, g) or 0
  local held = fl.holds and group_hold(ctx, queue, g) * 1000 or 0
  return interval, tolerance, cap, tat, held
end

-- Group g's turn (a head of groups) in a flowed claim: "held" when its cap or its rate holds
-- it (it leaves the turns for gfull or gwait), "empty" when it has no ready job left (it leaves
-- them), else what take_member answered for the head of its ready jobs. A group whose job was
-- leased or skipped goes to the back of the turns (t.turn: the turn it takes).
local function group_turn(ctx, pick, fl, g, t)
  local queue, now_us = pick.queue, pick.now * 1000
  local interval, tolerance, cap, tat, held = group_state(ctx, queue, fl, g, t)
  if cap and group_active(ctx, queue, g) >= cap then
    t.moved[g] = false
    redis.call("SADD", key_q(ctx, queue, "gfull"), g)
    return "held"
  end
  tat = math.max(tat, now_us)
  local at = math.max(allowed_at(tat, tolerance), held)
  if at > now_us then
    t.moved[g] = false
    redis.call("ZADD", key_q(ctx, queue, "gwait"), ms_up(ctx, at), g)
    return "held"
  end
  local member, more, index, bad = group_head(ctx, queue, g, t)
  if bad then -- (its index written by hand with another type: the group is left out)
    pick.damaged[#pick.damaged + 1] = bad
    t.moved[g] = false
    return "held"
  end
  if member == nil then
    t.moved[g] = false
    return "empty"
  end
  local got = take_member(ctx, pick, member, index)
  if got == "leased" or got == "skipped" or got == "seen" then
    if got == "leased" and interval then set_group_tat(ctx, queue, g, tat + interval, pick.now) end
    if got ~= "leased" then t.skips[g] = (t.skips[g] or 0) + 1 end
    if got == "leased" and not more then
      t.moved[g] = false
    else
      t.turn = t.turn + 1
      t.moved[g] = fmt(ctx, t.turn)
    end
  end
  return got
end

-- A claim of a queue with a flow and grouped jobs ready: its cap and rate first, then turn by
-- turn, the group at the head of groups, or the queue's own jobs (those without a group) when
-- their turn (uturn) comes first. The turns are read a batch at a time (a group given its turn
-- goes after every group read: its new turn is the highest) and written once per batch; the
-- queue's own jobs are read once, and again after a job dropped (below). Returns when the
-- queue's rate lets the next job start (µs), when it stopped for it.
local function claim_flowed(ctx, pick, fl)
  local queue, now = pick.queue, pick.now
  local now_us = now * 1000
  local cap = int(fl.cap or "")
  if cap then
    local room = cap - zread(ctx, "ZCARD", key_q(ctx, queue, "leased"))
    if room < pick.limit then pick.limit = room end
  end
  local groups, gwait = key_q(ctx, queue, "groups"), key_q(ctx, queue, "gwait")
  local interval, tolerance = rate_of(fl.rate)
  local tat = tonumber(fl.tat or "0") or 0
  local queue_hold = (tonumber(fl.hold or "0") or 0) * 1000
  local t = {turn = tonumber(fl.turn or "0") or 0, skips = {}, moved = {},
    own_limits = redis.call("HLEN", key_q(ctx, queue, "glimits")) > 0}
  local uturn, held = tonumber(fl.uturn or "0") or 0, nil
  -- groups whose wait is over take turns again (at most MAINTENANCE a call)
  local back = redis.call("ZRANGEBYSCORE", gwait, "-inf", fmt(ctx, now), "LIMIT", "0",
    fmt(ctx, MAINTENANCE))
  for _, g in ipairs(back) do
    redis.call("ZREM", gwait, g)
    redis.call("ZADD", groups, "NX", fmt(ctx, t.turn), g)
  end
  -- groups whose jobs this call made ready (promoted, or back from a run-out lease) join the
  -- turns now rather than at the call's end, so that this claim may lease them
  local f = ctx.flows
  local touched = f and f.touched[queue]
  if touched then
    f.touched[queue] = nil
    for g in pairs(touched) do join(ctx, queue, g, fmt(ctx, t.turn)) end
  end
  local heads, head_at = {}, 1
  local budget, leased = REPAIR_MAX, 0
  -- the queue's own ready jobs (they come first in ready), read once, and again after this
  -- claim dropped a job (one expired at its deadline may have made others ready by a cascade,
  -- ahead of those read)
  local function own_jobs()
    return zread(ctx, "ZRANGE", key_q(ctx, queue, "ready"), "0",
      fmt(ctx, pick.limit - #pick.rec + budget - 1), "WITHSCORES")
  end
  local own, own_at, dropped = own_jobs(), 1, false
  while #pick.rec < pick.limit and budget > 0 do
    local at = math.max(allowed_at(math.max(tat, now_us), tolerance), queue_hold)
    if at > now_us then
      held = at
      break
    end
    if heads[head_at] == nil then -- (the batch read: its turns written first)
      write_turns(ctx, queue, t)
      heads = redis.call("ZRANGE", groups, "0", fmt(ctx, 2 * (pick.limit - #pick.rec) - 1),
        "WITHSCORES")
      head_at = 1
    end
    if dropped then own, own_at, dropped = own_jobs(), 1, false end
    local mine = own[own_at] and tonumber(own[own_at + 1]) < GROUPED_MIN and own[own_at] or nil
    local got
    if mine and (heads[head_at] == nil or uturn <= tonumber(heads[head_at + 1])) then
      got = take_member(ctx, pick, mine, nil)
      own_at = own_at + 2
      if got == "leased" then
        t.turn = t.turn + 1
        uturn = t.turn
      end
    elseif heads[head_at] == nil then
      break
    else
      got = group_turn(ctx, pick, fl, heads[head_at], t)
      if got ~= "dropped" then head_at = head_at + 2 end
    end
    if got == "leased" then
      leased = leased + 1
      if interval then tat = math.max(tat, now_us) + interval end
    else
      budget = budget - 1
      dropped = dropped or got == "dropped"
    end
  end
  write_turns(ctx, queue, t)
  local k = key_q(ctx, queue, "flow")
  if leased > 0 then
    redis.call("HSET", k, "turn", fmt(ctx, t.turn), "uturn", fmt(ctx, uturn))
    if interval then redis.call("HSET", k, "tat", fmt(ctx, tat)) end
  elseif t.turn ~= tonumber(fl.turn or "0") then
    redis.call("HSET", k, "turn", fmt(ctx, t.turn))
  end
  return held
end

-- Whether the queue has a grouped job ready: grouped jobs sort last in ready (GROUPED).
local function grouped_ready(ctx, queue)
  local last = zread(ctx, "ZRANGE", key_q(ctx, queue, "ready"), "-1", "-1", "WITHSCORES")
  return last[2] ~= nil and tonumber(last[2]) >= GROUPED_MIN
end

-- A claim of a queue with limits and no grouped job ready: pick.limit cut to the room its cap
-- and its rate leave now. Returns when the rate lets the next job start (µs) when it leaves no
-- room, and the step that charges the rate for the jobs leased (nil: no rate).
local function flow_room(ctx, pick, fl)
  local queue, now_us = pick.queue, pick.now * 1000
  local cap = int(fl.cap or "")
  if cap then
    local room = cap - zread(ctx, "ZCARD", key_q(ctx, queue, "leased"))
    if room < pick.limit then pick.limit = room end
  end
  local interval, tolerance = rate_of(fl.rate)
  local held = (tonumber(fl.hold or "0") or 0) * 1000 -- (a hold: nothing starts before it)
  if held > now_us then
    pick.limit = 0
    return held, nil
  end
  if interval == nil then return nil, nil end
  local tat = math.max(tonumber(fl.tat or "0") or 0, now_us)
  local at = allowed_at(tat, tolerance)
  if at > now_us then
    pick.limit = 0
    return at, nil
  end
  local room = math.floor((now_us - at) / interval) + 1
  if room < pick.limit then pick.limit = room end
  return nil, function(leased)
    redis.call("HSET", key_q(ctx, queue, "flow"), "tat", fmt(ctx, tat + leased * interval))
  end
end

-- When a flowed claim that leased nothing should come back: the soonest of the queue's rate,
-- the first group waiting on its own, and next_due (ms as text, or "").
local function flow_next(ctx, queue, held, next_at)
  local best = next_at ~= "" and tonumber(next_at) or nil
  if held then
    local at = math.ceil(held / 1000)
    if best == nil or at < best then best = at end
  end
  local first = redis.call("ZRANGE", key_q(ctx, queue, "gwait"), "0", "0", "WITHSCORES")
  if first[2] and (best == nil or tonumber(first[2]) < best) then best = tonumber(first[2]) end
  return best and fmt(ctx, best) or ""
end

-- A claim of up to `limit` jobs of `queue`: its reply, and its call record (nil when it leased
-- nothing, or was refused: nothing to record). A damaged job among them is refused (CorruptJob)
-- only when it kept the call from claiming anything.
-- The keys every claim reads or writes (ready, leased; the events) are checked first; the others
-- only when a step is about to write them (due delayed jobs, run-out leases, a retrying or
-- misplaced job), before that step writes anything (a job whose own move would hit a bad key is
-- skipped as a damaged one is). Reads of the others refuse a key of the wrong type.
local function claim_queue(ctx, now, queue, worker, lease_ms, limit)
  local bad = paused_error(ctx, queue) or writes_error(ctx, queue, LEASE_WRITES)
  if bad then return bad end
  -- Nothing ready, nothing due, no flow settings (a worker's claim after its last job, in
  -- report_and_claim): the maintenance and the pick below would find nothing. A key of another
  -- type among those quiet reads leaves the claim to the steps below, which refuse it.
  if zread(ctx, "ZRANGE", key_q(ctx, queue, "ready"), "0", "0")[1] == nil then
    local delayed, leased = quiet(key_q(ctx, queue, ""), now)
    if delayed then return refuse("NothingClaimable", next_due(ctx, queue, {delayed, leased})) end
  end
  local _, bad2 = promote_best(ctx, queue, now, limit)
  if bad2 then return bad2 end
  _, bad2 = promote_queue(ctx, queue, now, MAINTENANCE)
  if bad2 then return bad2 end
  _, bad2 = expire_queue(ctx, queue, now, MAINTENANCE, {}, {})
  if bad2 then return bad2 end
  local fl, bad3 = flow_of(ctx, queue)
  if bad3 == nil and fl then bad3 = flow_error(ctx, queue) end
  if bad3 then return bad3 end
  local out, rec, damaged = {"ClaimsApplied", fmt(ctx, now)}, {}, {}
  local pick = {queue = queue, now = now, limit = limit, out = out, rec = rec, damaged = damaged,
    skipped = {}, grant = grant(ctx, worker, lease_ms, now)}
  local held, charge = nil, nil
  if fl and grouped_ready(ctx, queue) then
    held = claim_flowed(ctx, pick, fl)
    if #rec == 0 then
      return damaged[1] or refuse("NothingClaimable", flow_next(ctx, queue, held,
        next_due(ctx, queue)))
    end
    return out, table.concat(rec, " ")
  elseif fl then
    -- No grouped job is ready: the queue's own cap and rate cut the claim's size, and it picks
    -- best first as below.
    held, charge = flow_room(ctx, pick, fl)
    if pick.limit < 1 then
      return refuse("NothingClaimable", flow_next(ctx, queue, held, next_due(ctx, queue)))
    end
  end
  -- Entries of ready it drops, re-indexes or skips as damaged, at most (docs/lifecycle.md,
  -- "Best first, and its bounds"): past it, it answers NothingClaimable(now) if it leased
  -- nothing. A pass after the first reads up to 32 entries ahead.
  local budget, ahead = REPAIR_MAX, 0
  while #rec < limit and budget > 0 do
    local dropped = take_some(ctx, pick, budget, ahead)
    if dropped == 0 then break end
    budget = budget - dropped
    ahead = math.min(budget, 32)
  end
  if #rec == 0 then
    -- (with the budget spent, what lies further in ready may be due: claim again now)
    local next_at = budget > 0 and next_due(ctx, queue) or fmt(ctx, now)
    return damaged[1] or refuse("NothingClaimable", next_at)
  end
  if charge then charge(#rec) end
  return out, table.concat(rec, " ")
end

local function claim_main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local lease_ms, limit = claim_args(ctx, 3)
  if lease_ms == nil then return limit end
  local again = recorded(ctx)
  if again then return claims_replayed(ctx, again, args[4]) end
  local out, rec = claim_queue(ctx, now, args[3], args[4], lease_ms, limit)
  if rec then record(ctx, rec) end
  return out
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, claim_main(ctx)) end

return run_call(KEYS, ARGV, main)
