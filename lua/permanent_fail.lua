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

local function main()
  local c, err = open_lease()
  if c == nil then return err end
  if c.record then return job_applied(c, "") end
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  if ARGV[10] == "" then return invalid("reason must not be empty") end
  bad = error_text_error(ARGV[11], ARGV[10]) or check_queue(c.h.q)
  if bad then return bad end
  local closure
  closure, err = failure_closure(c.id)
  if closure == nil then return err end
  move(c.id, c.h, c.now, {st = "F", fin = fmt(c.now), ek = ARGV[11], em = ARGV[10]})
  apply_cancel_closure(closure, c.now)
  record(c.cid, "A")
  return job_applied(c, fmt(c.now))
end

return finish(main())
