-- sweep: expire every lease that ran out, over all queues of the namespace, at most `limit` jobs
-- per call (call again while it reports a full batch). Each job moves as expire.lua moves it.
-- A damaged job hash found in the lease index is reported and left untouched.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] limit (1..10000)
--
-- Replies
--   {"Swept", now, {expired ids...}, {damaged ids...}}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call sweeps again: leases already expired are not touched twice.

local function main()
  local now, e = clock(ARGV[2])
  if now == nil then return e end
  local limit = int(ARGV[3])
  if limit == nil or limit < 1 or limit > 10000 then
    return invalid("limit must be between 1 and 10000")
  end
  local bad = check_types({KEY_QUEUES}, "set")
  if bad then return bad end
  local out, damaged = {}, {}
  for _, queue in ipairs(redis.call("SMEMBERS", KEY_QUEUES)) do
    if #out >= limit then break end
    if valid_name(queue, NAME_MAX) and check_queue(queue) == nil then
      expire_queue(queue, now, limit - #out, out, damaged)
    end
  end
  return applied("Swept", fmt(now), out, damaged)
end

return finish(main())
