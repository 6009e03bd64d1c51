-- expire: Leased (lease run out) -> RetryWaiting("worker lease expired", now) while attempts
-- remain, else Failed. Recovery of a dead worker's job, one job, with the fence the caller saw.
-- Checks, the seed's expire_transition: FenceChanged first; then by state: LeaseHeld(expires_at)
-- for a lease not yet run out, StaleLease for a waiting job, TerminalJob for a finished one.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] job id   ARGV[4] observed fence
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"FenceChanged"} | {"LeaseHeld", expires_at} | {"StaleLease"} |
--   {"TerminalJob"} | {"InvalidJob", reason} | {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

local function main()
  local c, err = open_fenced(false)
  if c == nil then return err end
  if c.record then return job_applied(c, "") end
  if c.h.st == "W" or c.h.st == "R" then return refuse("StaleLease") end
  if TERMINAL[c.h.st] then return refuse("TerminalJob") end
  local bad = check_queue(c.h.q) or expire_job(c.id, c.h, c.now)
  if bad then return bad end
  record(c.cid, "A")
  return job_applied(c, fmt(c.now))
end

return run_call(KEYS, ARGV, main)
