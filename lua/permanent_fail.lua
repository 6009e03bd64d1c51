-- permanent_fail: Leased -> Failed(reason, now), whatever attempts remain. Entering Failed
-- cancels the dependents that asked for it (and theirs); the others stay blocked, visibly.
-- Checks: the seed's lease_error (StaleLease / LeaseExpired(expires_at)), then InvalidJob for an
-- empty reason, then our limits on kind and reason.
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

local function main() return lease_call("permanent_fail", ARGS[10], nil, ARGS[11]) end

return run_call(KEYS, ARGV, main)
