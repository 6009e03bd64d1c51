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

local function main()
  local c, err = open_lease()
  if c == nil then return err end
  if c.record then return job_applied(c, "") end
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  local output_ref = ARGV[10]
  if output_ref == "" then return invalid("output_ref must not be empty") end
  bad = text_error(output_ref, "output_ref") or check_queue(c.h.q)
  if bad then return bad end
  local dependents, derr = load_dependents(c.id)
  if dependents == nil then return derr end
  move(c.id, c.h, c.now, {st = "S", o = output_ref, res = ARGV[11], fin = fmt(c.now)})
  release_dependents(c.id, dependents, c.now)
  record(c.cid, "A")
  return job_applied(c, fmt(c.now))
end

return finish(main())
