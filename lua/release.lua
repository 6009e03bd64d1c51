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

local function main()
  local c, err = open_lease()
  if c == nil then return err end
  if c.record then return job_applied(c, "") end
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  local delay, e = int_arg(ARGV[10], "delay")
  if delay == nil then return e end
  if delay < 0 then return invalid("delay must be nonnegative") end
  bad = check_queue(c.h.q)
  if bad then return bad end
  move(c.id, c.h, c.now, {st = "W", at = fmt(c.now + delay), a = fmt(tonumber(c.h.a) - 1)})
  record(c.cid, "A")
  return job_applied(c, fmt(c.now))
end

return finish(main())
