-- promote: make due scheduled and retry-waiting jobs claimable (delayed -> ready), over all
-- queues of the namespace, at most `limit` jobs per call. No state changes: Waiting stays
-- Waiting, RetryWaiting stays RetryWaiting; only the claim index moves.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] limit (1..10000)
--
-- Replies
--   {"Promoted", now, count}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

local function main()
  local now, limit = maintenance_args()
  if now == nil then return limit end
  local moved = 0
  each_queue(limit, function() return moved end, function(queue, room)
    moved = moved + promote_queue(queue, now, room)
  end)
  return applied("Promoted", fmt(now), fmt(moved))
end

return run_call(KEYS, ARGV, main)
