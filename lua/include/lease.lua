-- lease.lua: lease tokens, their check, and the opening of the lease holder's calls.

-- uses: core, job, call, outcomes
local clock, fmt, num, refuse = Core.clock, Core.fmt, Core.num, Core.refuse
local blocked, job_reply, load_job, move = Job.blocked, Job.job_reply, Job.load_job, Job.move
local record, recorded = Call.record, Call.recorded
local job_applied = Outcomes.job_applied

local function token_reply(id, h)
  return {id, h.rv, h.w, h.f, h.x, h.n}
end

-- The lease check of docs/lifecycle.md (lease_error), with the claim nonce checked beside the
-- fence. t = {job_id, input_revision, worker_id, fence, expires_at, nonce}; worker = caller's id.
local function lease_error(id, h, t, worker, now)
  if worker ~= t[3] or id ~= t[1] or h.rv ~= t[2] then return refuse("StaleLease") end
  if h.st ~= "L" or h.w ~= t[3] or h.f ~= t[4] or h.n ~= t[6] or h.x ~= t[5] then
    return refuse("StaleLease")
  end
  if now >= tonumber(h.x) then return refuse("LeaseExpired", h.x) end
  return nil
end

-- The lease token of a claim as its call record keeps it: "fence expires_at nonce revision" (the
-- revision too: a newer input may have superseded the job since, include/revise.lua).
local function token_record(fence, expires_at, nonce, revision)
  return fence .. " " .. expires_at .. " " .. nonce .. " " .. revision
end

-- A claim reply rebuilt from a call record: the token the first delivery handed out (its fence,
-- expires_at, nonce and revision as the record keeps them: kept = {fence, expires_at, nonce,
-- revision}).
local function replayed_claim(ctx, id, h, worker, kept)
  return {"Claim", job_reply(ctx, id, h), {id, kept[4], worker, kept[1], kept[2], kept[3]}}
end

-- The write of a claim, once its checks passed (claim_job.lua, claim.lua): attempt + 1,
-- fence + 1, Leased until now + lease_ms with a new nonce. A job still blocked whose dependencies
-- all succeeded (claim_job found them so: a cascade has not reached it yet) has none pending.
-- grant: what every lease of the call shares (see grant); member: as for move.
local function lease(ctx, id, h, grant, nonce, member)
  local fence = num(h.f) + 1
  move(ctx, id, h, grant.now, {
    st = "L", a = fmt(ctx, num(h.a) + 1), f = fmt(ctx, fence), w = grant.worker,
    x = grant.x, n = nonce, att = grant.att,
    pd = blocked(h) and "0" or nil,
  }, member)
end

-- What the leases of one claim share: the worker, now, and the expiry and attempt time as text.
local function grant(ctx, worker, lease_ms, now)
  return {worker = worker, now = now, x = fmt(ctx, now + lease_ms), att = fmt(ctx, now)}
end


-- The opening of the lease holder's calls (complete, fail, permanent_fail, release, heartbeat):
-- ARGV[2] now, ARGV[3..8] the token (job_id, input_revision, worker_id, fence, expires_at,
-- nonce), ARGV[9] the caller's worker id. Returns the held job c = {now, id, h, t, worker,
-- record} (record: this call's record when it is a re-sent one), or nil and a refusal.
local function open_lease(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return nil, e end
  local t = {args[3], args[4], args[5], args[6], args[7], args[8]}
  local h, err = load_job(ctx, t[1])
  if h == nil then return nil, err end
  return {now = now, id = t[1], h = h, t = t, worker = args[9], record = recorded(ctx)}
end

-- The body of complete.lua / fail.lua / permanent_fail.lua / release.lua: the lease opened, a
-- re-sent call answered from its record, else `edge` (the script's own: a refusal, or nil once
-- the job has moved) with the script's arguments (up to four), then the record.
local function lease_outcome(ctx, edge, a, b, k, d)
  local c, err = open_lease(ctx)
  if c == nil then return err end
  if c.record then return job_applied(ctx, c, "") end
  local bad = edge(ctx, c, a, b, k, d)
  if bad then return bad end
  record(ctx, "A")
  return job_applied(ctx, c, fmt(ctx, c.now))
end

