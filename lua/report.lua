-- report: many lease holders' outcomes in one call (a worker's batch): each item is one of
-- complete / fail / permanent_fail / release, checked and applied on its own exactly as its own
-- script would (a refused item changes nothing and does not stop the others).
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] caller's worker id
-- ARGV[4]  item count N (1..1000), then N groups of 10:
--   call name, token (job_id, input_revision, worker_id, fence, expires_at, nonce), a, b, k
--   complete: a output_ref, b result        fail: a reason, b retry delay ms, k error kind
--   permanent_fail: a reason, k error kind   release: a delay ms
--
-- Replies
--   {"Reported", now, result...}   each result the job's new state tag (S R F W) when applied, or
--                                  a refusal as its own script gives it ({"StaleLease"},
--                                  {"LeaseExpired", at}, ...)
--   {"InvalidJob", reason}         a malformed call (nothing applied)
-- Replies are slim (no job fields): a worker reporting thousands of outcomes needs to know only
-- which were applied. A re-sent call (same call id) gets every item's first answer again:
-- OutcomeApplied for those applied, the same refusal for the others; it changes nothing more.

local function main()
  local cid = ARGS[1]
  local now, e = clock(ARGS[2])
  if now == nil then return e end
  local n, bad = report_count(4)
  if n == nil then return bad end
  local out = {"Reported", fmt(now)}
  record(cid, report_items(4, n, now, ARGS[3], decode_items(recorded(cid)), out))
  return out
end

return run_call(KEYS, ARGV, main)
