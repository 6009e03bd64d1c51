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

local GROUP = 10

local function item(i, now, worker)
  local b = 4 + (i - 1) * GROUP
  local name = ARGS[b + 1]
  local t = {ARGS[b + 2], ARGS[b + 3], ARGS[b + 4], ARGS[b + 5], ARGS[b + 6], ARGS[b + 7]}
  local h, err = load_job(t[1])
  if h == nil then return name, nil, err end
  local c = {now = now, id = t[1], h = h, t = t, worker = worker}
  return name, c, nil, ARGS[b + 8], ARGS[b + 9], ARGS[b + 10]
end

-- One item: its reply, and what the call record keeps of it (true: applied; else the refusal).
local function run(i, now, worker, before)
  if type(before) == "table" then return before, before end -- refused the first time: again
  local name, c, err, a, b, k = item(i, now, worker)
  if c == nil then return err, err end
  if before == true then return c.h.st, true end
  local bad = LEASE_CALLS[name](c, a, b, k)
  if bad then return bad, bad end
  return c.h.st, true
end

local function main()
  local cid = ARGS[1]
  local now, e = clock(ARGS[2])
  if now == nil then return e end
  local worker, n = ARGS[3], int(ARGS[4])
  if n == nil or n < 1 or n > 1000 or #ARGS ~= 4 + n * GROUP then
    return invalid("malformed report call")
  end
  for i = 1, n do
    if LEASE_CALLS[ARGS[4 + (i - 1) * GROUP + 1]] == nil then
      return invalid("unknown call '" .. ARGS[4 + (i - 1) * GROUP + 1] .. "'")
    end
  end
  local before = decode_items(recorded(cid))
  local out, kept = {"Reported", fmt(now)}, {}
  for i = 1, n do
    out[#out + 1], kept[i] = run(i, now, worker, before[i])
  end
  record(cid, encode_items(kept))
  return out
end

return run_call(KEYS, ARGV, main)
