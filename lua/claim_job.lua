-- claim_job: Waiting / RetryWaiting / Leased-and-expired -> Leased, one job by id.
-- Checks, in order (docs/lifecycle.md, claim_job): InvalidJob for a malformed id; MissingJob;
-- TerminalJob; LeaseHeld(expires_at) while a lease runs; then claim_ready below: InvalidJob (empty
-- worker, lease < 1), NotAvailable(available_at), DeadlinePassed(deadline) for a job never started
-- whose deadline has come (nothing written: the sweep or a claim by queue expires it),
-- AttemptLimitReached, our limit on the worker id,
-- then, for a blocked job, dependency_error: MissingDependency(dep) / IncompleteDependency(dep);
-- then QueuePaused(queue) while the job's queue is paused (pause.lua: a job that could otherwise
-- be leased is not, by id either); the queue's keys (CorruptKey). The write is lease() (as
-- claim.lua's).
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id (also the lease nonce)   ARGV[2] now ("" = server clock)   ARGV[3] job id
-- ARGV[4]  worker id   ARGV[5] lease duration ms
--
-- Replies
--   {"ClaimApplied", now, {"Claim", job, token}}
--   {"MissingJob", id} | {"TerminalJob"} | {"LeaseHeld", expires_at} | {"InvalidJob", reason} |
--   {"NotAvailable", available_at} | {"DeadlinePassed", deadline} | {"AttemptLimitReached"} |
--   {"MissingDependency", id} |
--   {"IncompleteDependency", id} | {"QueuePaused", queue} | {"CorruptJob", id, reason} |
--   {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets the same token again, with the job as it is now.

-- uses: core, checks, job, call, lease, claim
local applied, clock, fmt, invalid = Core.applied, Core.clock, Core.fmt, Core.invalid
local refuse, split, TERMINAL = Core.refuse, Core.split, Core.TERMINAL
local check_queue, duration_arg, id_error = Checks.check_queue, Checks.duration_arg, Checks.id_error
local text_error = Checks.text_error
local blocked, dependency_error, job_reply = Job.blocked, Job.dependency_error, Job.job_reply
local load_job, past_deadline = Job.load_job, Job.past_deadline
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local grant, lease, replayed_claim = Lease.grant, Lease.lease, Lease.replayed_claim
local token_record = Lease.token_record
local token_reply = Lease.token_reply
local paused_error = Claim.paused_error

-- The checks of a job that may be leased: the lease duration, or a refusal.
local function claim_ready(ctx, h, worker, lease_arg, now, available_at)
  if worker == "" then return invalid("worker_id must not be empty") end
  local lease_ms, e = duration_arg(lease_arg, "lease_duration", 1)
  if lease_ms == nil then return e end
  if now < available_at then return refuse("NotAvailable", fmt(ctx, available_at)) end
  if past_deadline(h, now) then return refuse("DeadlinePassed", h.dl) end
  if tonumber(h.a) >= tonumber(h.m) then return refuse("AttemptLimitReached") end
  -- pd counts dependencies not yet succeeded; at 0 they all did (Succeeded is final, though a
  -- succeeded dependency may since have been pruned), so only a blocked job reads them.
  local deps_bad = blocked(h) and dependency_error(ctx, h) or nil
  local bad = text_error(worker, "worker_id") or deps_bad or paused_error(ctx, h.q)
    or check_queue(ctx, h.q)
  if bad then return bad end
  return nil, lease_ms
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local id, worker = args[3], args[4]
  local bad_id = id_error(id, "job_id")
  if bad_id then return bad_id end
  local h, err = load_job(ctx, id)
  if h == nil then return err end
  local again = recorded(ctx)
  if again then
    return applied("ClaimApplied", "", replayed_claim(ctx, id, h, worker, split(again)))
  end
  if TERMINAL[h.st] then return refuse("TerminalJob") end
  local available_at = tonumber(h.at)
  if h.st == "L" then
    if now < tonumber(h.x) then return refuse("LeaseHeld", h.x) end
    available_at = now
  end
  local bad, lease_ms = claim_ready(ctx, h, worker, args[5], now, available_at)
  if bad then return bad end
  lease(ctx, id, h, grant(ctx, worker, lease_ms, now), args[1])
  local claim = {"Claim", job_reply(ctx, id, h), token_reply(id, h)}
  record(ctx, token_record(h.f, h.x, h.n, h.rv))
  return applied("ClaimApplied", fmt(ctx, now), claim)
end

return run_call(KEYS, ARGV, main)
