-- permanent_fail: Leased -> Failed(reason, now), whatever attempts remain. Entering Failed
-- cancels the dependents that asked for it (and theirs); the others stay blocked, visibly.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease /
-- LeaseExpired(expires_at)); InvalidJob for an empty reason, then our limits on kind and reason.
-- The edge is permanent_fail_job below; report.lua applies it too, once per PermanentFail item.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] reason   ARGV[11] error kind
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

-- c: the held job (open_lease). A refusal, or nil once the job has moved.
local function permanent_fail_job(ctx, c, reason, kind)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  if reason == "" then return invalid("reason must not be empty") end
  bad = error_text_error(kind, reason) or check_queue(ctx, c.h.q)
  if bad then return bad end
  return move_or_fail(ctx, c.id, c.h, c.now,
    {st = "F", fin = fmt(ctx, c.now), ek = kind, em = reason})
end

local function main(ctx)
  return lease_outcome(ctx, permanent_fail_job, ctx.args[10], ctx.args[11])
end

return run_call(KEYS, ARGV, main)
