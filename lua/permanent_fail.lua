-- permanent_fail: Leased -> Failed(reason, now), whatever attempts remain. Entering Failed
-- cancels the dependents that asked for it (and theirs); the others stay blocked, visibly.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease /
-- LeaseExpired(expires_at)); InvalidJob for an empty reason, then our limits on kind, reason and
-- traceback; the job's failure history key (CorruptKey). Applied: the attempt is kept in the
-- job's failure history (keep_error in include/outcomes.lua).
-- The edge is permanent_fail_job below; report_many.lua applies it too, once per PermanentFail item.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] reason   ARGV[11] error kind
-- ARGV[12] traceback (optional: "" or absent for none; at most 8192 bytes)
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

-- uses: core, checks, call, cascades, outcomes, lease, callbacks
local fmt, invalid, key_errors = Core.fmt, Core.invalid, Core.key_errors
local check_queue, check_types = Checks.check_queue, Checks.check_types
local error_text_error, text_error = Checks.error_text_error, Checks.text_error
local run_call = Call.run_call
local move_or_fail = Cascades.move_or_fail
local keep_error = Outcomes.keep_error
local lease_error, lease_outcome = Lease.lease_error, Lease.lease_outcome
local fire_due = Callbacks.fire_due

-- c: the held job (open_lease). A refusal, or nil once the job has moved.
local function permanent_fail_job(ctx, c, reason, kind, trace)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  if reason == "" then return invalid("reason must not be empty") end
  trace = trace or ""
  bad = error_text_error(kind, reason) or text_error(trace, "traceback")
    or check_queue(ctx, c.h.q) or check_types(ctx, {key_errors(ctx, c.id)}, "list")
  if bad then return bad end
  bad = move_or_fail(ctx, c.id, c.h, c.now,
    {st = "F", fin = fmt(ctx, c.now), ek = kind, em = reason})
  if bad then return bad end
  keep_error(ctx, c.id, c.h, c.now, {kind = kind, reason = reason, trace = trace})
  return nil
end

local function permanent_fail_main(ctx)
  local args = ctx.args
  return lease_outcome(ctx, permanent_fail_job, args[10], args[11], args[12])
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, permanent_fail_main(ctx)) end

return run_call(KEYS, ARGV, main)
