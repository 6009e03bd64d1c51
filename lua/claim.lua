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

-- uses: core, checks, index, job, call, lease, promote_due, sweep_expired
local clock, fmt, int, invalid = Core.clock, Core.fmt, Core.int, Core.invalid
local key_paused, key_q, num, pcall_typed = Core.key_paused, Core.key_q, Core.num, Core.pcall_typed
local refuse, split = Core.refuse, Core.split
local check_queue, duration_arg = Checks.check_queue, Checks.duration_arg
local name_error, text_error = Checks.name_error, Checks.text_error
local writes_error = Checks.writes_error
local zread, zrem = Index.zread, Index.zrem
local blocked, load_job, place, ready_id = Job.blocked, Job.load_job, Job.place, Job.ready_id
local past_deadline, unplace = Job.past_deadline, Job.unplace
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local grant, lease, replayed_claim = Lease.grant, Lease.lease, Lease.replayed_claim
local token_record = Lease.token_record
local promote_best, promote_queue = PromoteDue.promote_best, PromoteDue.promote_queue
local expire_queue, expire_unstarted = SweepExpired.expire_queue, SweepExpired.expire_unstarted

local MAINTENANCE = 100

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

local function next_due(ctx, queue)
  local best = nil
  for _, what in ipairs({"delayed", "leased"}) do -- (both read, so type-checked, by the opening)
    local first = zread(ctx, "ZRANGE", key_q(ctx, queue, what), "0", "0", "WITHSCORES")
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

-- Leases up to pick.limit jobs from the head of the ready index into pick.out / pick.rec;
-- returns how many index entries it dropped (left behind by hand). A damaged job, or one whose
-- move would write a key of the wrong type, is skipped and left as it is (pick.damaged keeps the
-- refusals, pick.skipped the ids): the jobs around it are still claimed. pick: the claim (see
-- claim_queue).
local function take_some(ctx, pick, budget, ahead)
  local queue, now, limit, out, rec = pick.queue, pick.now, pick.limit, pick.out, pick.rec
  local damaged, skipped, leases = pick.damaged, pick.skipped, pick.grant
  local dropped = 0
  local loaded, cid = ctx.loaded, ctx.args[1]
  ahead = ahead + #damaged
  local members = zread(ctx, "ZRANGE", key_q(ctx, queue, "ready"), "0",
    fmt(ctx, limit - #rec - 1 + ahead))
  for _, member in ipairs(members) do
    if #rec >= limit or dropped >= budget then break end
    local id = ready_id(member)
    local h, err, bad = nil, nil, nil
    if not skipped[id] then h, err = load_job(ctx, id) end
    if skipped[id] then -- damaged, seen on an earlier pass: read on past it
    elseif h == nil and err[1] ~= "MissingJob" then
      bad = err
    elseif h == nil then
      zrem(ctx, key_q(ctx, queue, "ready"), member)
      dropped = dropped + 1
    elseif past_deadline(h, now) then
      -- Never started by its deadline: expired instead of leased (it may cascade: every index
      -- of the queue is checked), and counted against the budget as a dropped entry.
      bad = check_queue(ctx, h.q) or expire_unstarted(ctx, id, h, now)
      if bad == nil then dropped = dropped + 1 end
    elseif (h.st == "W" or h.st == "R") and not blocked(h)
        and num(h.a) < num(h.m) and tonumber(h.at) <= now then
      bad = writes_error(ctx, h.q, h.st == "R" and RETRY_LEASE_WRITES or LEASE_WRITES)
      if bad == nil then
        local raw = loaded[id] -- the fields as loaded, before the lease (see the replies above)
        lease(ctx, id, h, leases, cid .. "." .. fmt(ctx, #rec + 1), member)
        out[#out + 1] = id
        out[#out + 1] = raw
        rec[#rec + 1] = id .. " " .. token_record(h)
      end
    else
      -- Not claimable after all: an entry left behind by hand, or a clock that went back (a
      -- failover to a server whose clock is behind). Drop the entry; a live job is re-indexed
      -- where it belongs (delayed or blocked), one out of attempts stays visible as waiting.
      -- Rare, and it may write any index of the job's queue: all of them are checked.
      bad = check_queue(ctx, h.q)
      if bad == nil then
        zrem(ctx, key_q(ctx, queue, "ready"), member)
        if (h.st == "W" or h.st == "R") and num(h.a) < num(h.m) then
          unplace(ctx, id, h)
          place(ctx, id, h, now)
        end
        dropped = dropped + 1
      end
    end
    if bad then
      damaged[#damaged + 1] = bad
      skipped[id] = true
      dropped = dropped + 1 -- not dropped, but skipped: read on past it
    end
  end
  return dropped
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
  local _, bad2 = promote_best(ctx, queue, now, limit)
  if bad2 then return bad2 end
  _, bad2 = promote_queue(ctx, queue, now, MAINTENANCE)
  if bad2 then return bad2 end
  _, bad2 = expire_queue(ctx, queue, now, MAINTENANCE, {}, {})
  if bad2 then return bad2 end
  local out, rec, damaged = {"ClaimsApplied", fmt(ctx, now)}, {}, {}
  local pick = {queue = queue, now = now, limit = limit, out = out, rec = rec, damaged = damaged,
    skipped = {}, grant = grant(ctx, worker, lease_ms, now)}
  -- Entries of ready it drops, re-indexes or skips as damaged, at most (docs/lifecycle.md,
  -- "Best first, and its bounds"): past it, it answers NothingClaimable(now) if it leased
  -- nothing. A pass after the first reads up to 32 entries ahead.
  local REPAIR_MAX = 100
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
  return out, table.concat(rec, " ")
end

local function main(ctx)
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

return run_call(KEYS, ARGV, main)
