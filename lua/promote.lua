-- promote: make due scheduled and retry-waiting jobs claimable (delayed -> ready), over all
-- queues of the namespace, at most `limit` jobs per call. No state changes: Waiting stays
-- Waiting, RetryWaiting stays RetryWaiting; only the claim index moves.
-- The edge, for one queue, is promote_queue below; claim.lua runs it on its queue before it
-- picks.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] limit (1..10000)
--
-- Replies
--   {"Promoted", now, count}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

local PROMOTE_WRITES = {"delayed", "ready", wake = true}

-- Moves due jobs of a queue from delayed to ready, at most `limit`. Returns how many, and the
-- refusal that stopped it before any write (a key of the wrong type).
local function promote_queue(ctx, queue, now, limit)
  local ids, bad = zread_typed(ctx, "ZRANGEBYSCORE", key_q(ctx, queue, "delayed"), "-inf",
    fmt(ctx, now), "LIMIT", "0", fmt(ctx, limit))
  if ids == nil then return 0, bad end
  if ids[1] ~= nil then
    bad = writes_error(ctx, queue, PROMOTE_WRITES)
    if bad then return 0, bad end
  end
  local moved = 0
  for _, id in ipairs(ids) do
    local h = load_job(ctx, id)
    zrem(ctx, key_q(ctx, queue, "delayed"), id)
    if h and (h.st == "W" or h.st == "R") and not blocked(h) then
      zadd(ctx, key_q(ctx, queue, "ready"), h.pr, ready_member(ctx, id, h))
      wake(ctx, queue)
      moved = moved + 1
    end
  end
  return moved
end

local function main(ctx)
  local now, limit = maintenance_args(ctx)
  if now == nil then return limit end
  local moved = 0
  each_queue(ctx, limit, function() return moved end, function(queue, room)
    moved = moved + promote_queue(ctx, queue, now, room)
  end)
  return applied("Promoted", fmt(ctx, now), fmt(ctx, moved))
end

return run_call(KEYS, ARGV, main)
