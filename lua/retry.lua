-- retry (operator_retry): Failed -> RetryWaiting(now) with max_attempts + 1, so the job runs once
-- more. The job keeps its last error (kind and message: the state's reason) and its failure
-- history; the operator's reason goes with the `retryable` event, as its `pm`. Dependents still
-- blocked on it run once it succeeds. The next claim gets a new nonce, as every claim does.
-- Checks, in order (docs/lifecycle.md, retry): InvalidJob for a malformed id; MissingJob;
-- InvalidJob for a fence given that is no integer, FenceChanged; NotFailed; our limit on the
-- reason; the queue's keys (CorruptKey).
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] job id
-- ARGV[4]  expected fence ("" = whatever it is now)   ARGV[5] reason
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"FenceChanged"} | {"NotFailed"} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

-- uses: core, checks, events, job, call, outcomes
local fmt, refuse = Core.fmt, Core.refuse
local check_queue, text_error = Checks.check_queue, Checks.text_error
local move = Job.move
local note = Events.note
local record, run_call = Call.record, Call.run_call
local job_applied, open_fenced = Outcomes.job_applied, Outcomes.open_fenced

local function main(ctx)
  local reason = ctx.args[5]
  local c, err = open_fenced(ctx, true)
  if c == nil then return err end
  if c.record then return job_applied(ctx, c, "") end
  if c.h.st ~= "F" then return refuse("NotFailed") end
  local bad = text_error(reason, "reason") or check_queue(ctx, c.h.q)
  if bad then return bad end
  move(ctx, c.id, c.h, c.now, {
    st = "R", at = fmt(ctx, c.now), m = fmt(ctx, tonumber(c.h.m) + 1),
  })
  note(ctx, reason)
  record(ctx, "A")
  return job_applied(ctx, c, fmt(ctx, c.now))
end

return run_call(KEYS, ARGV, main)
