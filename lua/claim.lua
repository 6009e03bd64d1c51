-- claim: Waiting / RetryWaiting (due, dependencies met) -> Leased, by queue, up to `limit` jobs.
-- Best first: lowest priority value, then earliest available_at, then enqueue order. Before it
-- picks, it promotes due scheduled jobs of the queue and expires run-out leases of the queue
-- (both bounded), so it never offers a job a claim by id would refuse.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] queue   ARGV[4] worker id
-- ARGV[5]  lease duration ms   ARGV[6] limit (1..1000)
--
-- Replies
--   {"ClaimsApplied", now, id, fields, id, fields, ...}   each leased job as its id and its
--                                     fields as they were before the lease ({field, value, ...},
--                                     as HGETALL gives them): the client applies the lease, which
--                                     is fully known to it (st "L", a + 1, f + 1, w = worker,
--                                     x = now + lease duration, n = "<call id>.<i>" for the i-th
--                                     job, att = now); the token is id, rv, w, f, x, n
--   {"ClaimsApplied", "", {"Claim", job, token}...}   a re-sent call: token = {job_id,
--                                     input_revision, worker, fence, expires_at, nonce} as first
--                                     handed out (the job as it is now)
--   {"NothingClaimable", next_at}   next_at: when the next delayed job or lease comes due, or ""
--   {"InvalidJob", reason} | {"CorruptKey", key, reason} | {"CorruptJob", id, reason}
-- The nonce of the i-th claim is "<call id>.<i>". A re-sent call (same call id) gets the claims
-- the first delivery made, with the same tokens, and leases nothing more.

local function main()
  local cid = ARGS[1]
  local now, e = clock(ARGS[2])
  if now == nil then return e end
  local lease_ms, limit = claim_args(3)
  if lease_ms == nil then return limit end
  local again = recorded(cid)
  if again then return claims_replayed(again, ARGS[4]) end
  local out, rec = claim_queue(cid, now, ARGS[3], ARGS[4], lease_ms, limit)
  if rec then record(cid, rec) end
  return out
end

return run_call(KEYS, ARGV, main)
