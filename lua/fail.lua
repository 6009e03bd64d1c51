-- fail: Leased -> RetryWaiting(reason, now + retry_delay) while attempt < max_attempts, else
-- Failed(reason, now). Entering Failed cancels the dependents that asked for it (and theirs);
-- the other dependents stay blocked, visibly.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease /
-- LeaseExpired(expires_at)); InvalidJob for a retry delay that is no integer or negative, then
-- our limits on kind, reason and traceback; the job's failure history key (CorruptKey).
-- Applied: the attempt is kept in the job's failure history (keep_error in include/outcomes.lua).
-- The edge is fail_job below; report_many.lua applies it too, once per Fail item.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] reason   ARGV[11] retry delay ms   ARGV[12] error kind
-- ARGV[13] traceback (optional: "" or absent for none; at most 8192 bytes)
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

-- uses: core, checks, call, cascades, outcomes, lease, callbacks
local key_errors = Core.key_errors
local check_queue, check_types = Checks.check_queue, Checks.check_types
local duration_arg, error_text_error = Checks.duration_arg, Checks.error_text_error
local text_error, time_error = Checks.text_error, Checks.time_error
local run_call = Call.run_call
local move_or_fail = Cascades.move_or_fail
local keep_error, retry_or_fail = Outcomes.keep_error, Outcomes.retry_or_fail
local lease_error, lease_outcome = Lease.lease_error, Lease.lease_outcome
local fire_due = Callbacks.fire_due

-- c: the held job (open_lease). A refusal, or nil once the job has moved.
local function fail_job(ctx, c, reason, delay_arg, kind, trace)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  local delay, e = duration_arg(delay_arg, "retry_delay", 0)
  if delay == nil then return e end
  trace = trace or ""
  bad = time_error(c.now + delay, "now + retry_delay") or error_text_error(kind, reason)
    or text_error(trace, "traceback") or check_queue(ctx, c.h.q)
    or check_types(ctx, {key_errors(ctx, c.id)}, "list")
  if bad then return bad end
  bad = move_or_fail(ctx, c.id, c.h, c.now, retry_or_fail(ctx, c.h, kind, reason, c.now, delay))
  if bad then return bad end
  keep_error(ctx, c.id, c.h, c.now, {kind = kind, reason = reason, trace = trace})
  return nil
end

local function fail_main(ctx)
  local args = ctx.args
  return lease_outcome(ctx, fail_job, args[10], args[11], args[12], args[13])
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, fail_main(ctx)) end

return run_call(KEYS, ARGV, main)
