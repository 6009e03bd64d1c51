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
  local now, limit = maintenance_args()
  if now == nil then return limit end
  local out, damaged = {}, {}
  each_queue(limit, function() return #out end, function(queue, room)
    expire_queue(queue, now, room, out, damaged)
  end)
  return applied("Swept", fmt(now), out, damaged)
end

return run_call(KEYS, ARGV, main)
