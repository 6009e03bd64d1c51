-- release: Leased -> Waiting(now + delay), handing the job back without using an attempt
-- (attempt - 1). For a worker that shuts down before a job finished, or a task that asks to run
-- later ("snooze"). The fence stays; the next claim raises it as every claim does.
-- Checks: the seed's lease_error (StaleLease / LeaseExpired(expires_at)), then InvalidJob for a
-- negative delay.
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

local function main() return lease_call("release", ARGS[10]) end

return run_call(KEYS, ARGV, main)
