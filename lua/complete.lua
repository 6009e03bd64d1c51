-- complete: Leased -> Succeeded(output_ref, now). Releases, in the same script, every dependent
-- whose dependencies have now all succeeded.
-- Checks: the seed's lease_error (StaleLease on any mismatch of worker, job id, input revision,
-- state, fence, nonce or expiry; LeaseExpired(expires_at) when now >= expires_at), then
-- InvalidJob for an empty output_ref.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] output_ref   ARGV[11] result (msgpack bytes, may be "")
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again, not StaleLease.

local function main() return lease_call("complete", ARGS[10], ARGS[11]) end

return run_call(KEYS, ARGV, main)
