-- retry (operator_retry): Failed -> RetryWaiting(reason, now) with max_attempts + 1, so the job
-- runs once more. Dependents still blocked on it run once it succeeds. The next claim gets a new
-- nonce, as every claim does.
-- Checks, the seed's operator_retry_transition in order: FenceChanged; NotFailed.
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

local function main()
  local c, err = open_fenced(true)
  if c == nil then return err end
  if c.record then return job_applied(c, "") end
  if c.h.st ~= "F" then return refuse("NotFailed") end
  local bad = text_error(ARGS[5], "reason") or check_queue(c.h.q)
  if bad then return bad end
  move(c.id, c.h, c.now, {
    st = "R", at = fmt(c.now), em = ARGS[5], ek = "OperatorRetry",
    m = fmt(tonumber(c.h.m) + 1),
  })
  record(c.cid, "A")
  return job_applied(c, fmt(c.now))
end

return run_call(KEYS, ARGV, main)
