-- queues (read only): every queue of the namespace (every name ever enqueued to), sorted by
-- name, with its counts (as counts.lua gives them, by its queue_counts) and whether it is paused.
-- A name in the queue set that is no valid queue name (written by hand) is left out.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)
--
-- Replies
--   {"Queues", now, {name, paused, available, scheduled, retryable, executing, completed,
--    discarded, cancelled, blocked, expired}...}   paused: "1" or "0"
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, checks, call, counts
local clock, fmt, key_paused, key_queues = Core.clock, Core.fmt, Core.key_paused, Core.key_queues
local NAME_MAX = Core.NAME_MAX
local check_queue, check_types = Checks.check_queue, Checks.check_types
local valid_name = Checks.valid_name
local run_call = Call.run_call
local queue_counts = Counts.queue_counts

local function main(ctx)
  local now, e = clock(ctx.args[2])
  if now == nil then return e end
  local bad = check_types(ctx, {key_queues(ctx), key_paused(ctx)}, "set")
  if bad then return bad end
  local names = {}
  for _, queue in ipairs(redis.call("SMEMBERS", key_queues(ctx))) do
    if valid_name(queue, NAME_MAX) then names[#names + 1] = queue end
  end
  table.sort(names)
  local out = {"Queues", fmt(ctx, now)}
  for _, queue in ipairs(names) do
    bad = check_queue(ctx, queue)
    if bad then return bad end
    local paused = fmt(ctx, redis.call("SISMEMBER", key_paused(ctx), queue))
    out[#out + 1] = {queue, paused, unpack(queue_counts(ctx, queue, now))}
  end
  return out
end

return run_call(KEYS, ARGV, main)
