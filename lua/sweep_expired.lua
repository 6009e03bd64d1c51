-- sweep_expired: expire every lease that ran out, over all queues of the namespace, at most `limit` jobs
-- per call (call again while it reports a full batch). Each job moves as expire.lua moves it
-- (its expire_job). A damaged job hash found in the lease index is reported and left untouched.
-- The sweep of one queue is expire_queue below; claim.lua runs it on its queue before it picks.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] limit (1..10000)
--
-- Replies
--   {"Swept", now, {expired ids...}, {damaged ids...}}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call sweeps again: leases already expired are not touched twice.

-- uses: core, checks, index, job, call, expire
local applied, fmt, key_q = Core.applied, Core.fmt, Core.key_q
local check_queue = Checks.check_queue
local zread_typed, zrem = Index.zread_typed, Index.zrem
local load_job = Job.load_job
local each_queue, maintenance_args, run_call = Call.each_queue, Call.maintenance_args, Call.run_call
local expire_job = Expire.expire_job

-- Expires the leases of a queue that ran out, at most `limit`. Returns the ids it moved, and the
-- refusal that stopped it before any write (a key of the wrong type: an expiry may write any key
-- of the queue, so all are checked when a lease has run out).
-- A damaged job hash in the lease index is left where it is and reported, not touched.
local function expire_queue(ctx, queue, now, limit, out, damaged)
  local ids, bad = zread_typed(ctx, "ZRANGEBYSCORE", key_q(ctx, queue, "leased"), "-inf",
    fmt(ctx, now), "LIMIT", "0", fmt(ctx, limit))
  if ids == nil then return out, bad end
  if ids[1] ~= nil then
    bad = check_queue(ctx, queue)
    if bad then return out, bad end
  end
  for _, id in ipairs(ids) do
    local h, err = load_job(ctx, id)
    if h == nil then
      if err[1] == "MissingJob" then
        zrem(ctx, key_q(ctx, queue, "leased"), id)
      else
        damaged[#damaged + 1] = id
      end
    elseif h.st ~= "L" then
      zrem(ctx, key_q(ctx, queue, "leased"), id)
    else
      local bad = expire_job(ctx, id, h, now)
      if bad then damaged[#damaged + 1] = id else out[#out + 1] = id end
    end
  end
  return out
end

local function main(ctx)
  local now, limit = maintenance_args(ctx)
  if now == nil then return limit end
  local out, damaged = {}, {}
  each_queue(ctx, limit, function() return #out end, function(queue, room)
    expire_queue(ctx, queue, now, room, out, damaged)
  end)
  return applied("Swept", fmt(ctx, now), out, damaged)
end

return run_call(KEYS, ARGV, main)
