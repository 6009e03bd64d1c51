-- release: Leased -> Waiting(now + delay), handing the job back without using an attempt
-- (attempt - 1). For a worker that shuts down before a job finished, or a task that asks to run
-- later ("snooze"). The fence stays; the next claim raises it as every claim does.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease /
-- LeaseExpired(expires_at)); InvalidJob for a delay that is no integer or negative.
-- The edge is release_job below; report_many.lua applies it too, once per Release item.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] delay ms
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

-- uses: core, checks, job, call, lease
local fmt, num = Core.fmt, Core.num
local check_queue, duration_arg = Checks.check_queue, Checks.duration_arg
local time_error = Checks.time_error
local move = Job.move
local run_call = Call.run_call
local lease_error, lease_outcome = Lease.lease_error, Lease.lease_outcome

-- c: the held job (open_lease). A refusal, or nil once the job has moved.
local function release_job(ctx, c, delay_arg)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  local delay, e = duration_arg(delay_arg, "delay", 0)
  if delay == nil then return e end
  bad = time_error(c.now + delay, "now + delay") or check_queue(ctx, c.h.q)
  if bad then return bad end
  move(ctx, c.id, c.h, c.now,
    {st = "W", at = fmt(ctx, c.now + delay), a = fmt(ctx, num(c.h.a) - 1)})
  return nil
end

local function main(ctx) return lease_outcome(ctx, release_job, ctx.args[10]) end

return run_call(KEYS, ARGV, main)
