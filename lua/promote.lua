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
  local now, e = clock(ARGV[2])
  if now == nil then return e end
  local limit = int(ARGV[3])
  if limit == nil or limit < 1 or limit > 10000 then
    return invalid("limit must be between 1 and 10000")
  end
  local bad = check_types({KEY_QUEUES}, "set")
  if bad then return bad end
  local moved = 0
  for _, queue in ipairs(redis.call("SMEMBERS", KEY_QUEUES)) do
    if moved >= limit then break end
    if valid_name(queue, NAME_MAX) and check_queue(queue) == nil then
      moved = moved + promote_queue(queue, now, limit - moved)
    end
  end
  return applied("Promoted", fmt(now), fmt(moved))
end

return finish(main())
