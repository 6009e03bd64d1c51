-- fail: Leased -> RetryWaiting(reason, now + retry_delay) while attempt < max_attempts, else
-- Failed(reason, now). Entering Failed cancels the dependents that asked for it (and theirs);
-- the other dependents stay blocked, visibly.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease /
-- LeaseExpired(expires_at)); InvalidJob for a retry delay that is no integer or negative, then
-- our limits on kind and reason.
-- The edge is fail_job below; report.lua applies it too, once per Fail item.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] reason   ARGV[11] retry delay ms   ARGV[12] error kind
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

-- c: the held job (open_lease). A refusal, or nil once the job has moved.
local function fail_job(ctx, c, reason, delay_arg, kind)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  local delay, e = duration_arg(delay_arg, "retry_delay", 0)
  if delay == nil then return e end
  bad = time_error(c.now + delay, "now + retry_delay") or error_text_error(kind, reason)
    or check_queue(ctx, c.h.q)
  if bad then return bad end
  return move_or_fail(ctx, c.id, c.h, c.now, retry_or_fail(ctx, c.h, kind, reason, c.now, delay))
end

local function main(ctx)
  local args = ctx.args
  return lease_outcome(ctx, fail_job, args[10], args[11], args[12])
end

return run_call(KEYS, ARGV, main)
