-- close_batch: no more members may join the batch (enqueue refuses them BatchClosed); its
-- callbacks fire in this call if every member has ended (include/callbacks.lua): an empty batch
-- fires on_complete and on_success here. Idempotent: closing a closed batch changes nothing.
-- Checks, in order: InvalidJob (now, the batch id); the types of the batch's keys (CorruptKey);
-- MissingBatch.
--
-- KEYS[1]  namespace prefix   KEYS[2] optional: the event stream
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] batch id
--
-- Replies
--   {"BatchClosing", now, changed}   changed: "1" this call closed it, "0" it was closed before
--   {"MissingBatch", id} | {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets the first delivery's answer again, now "".

-- uses: core, call, batches, callbacks
local applied, fmt, key_batch, refuse = Core.applied, Core.fmt, Core.key_batch, Core.refuse
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local batch_args = Batches.batch_args
local fire_due = Callbacks.fire_due

local function main(ctx)
  local now, id = batch_args(ctx)
  if now == nil then return id end
  local again = recorded(ctx)
  if again then return applied("BatchClosing", "", again) end
  local k = key_batch(ctx, id)
  local closed = redis.call("HGET", k, "cl")
  if not closed then return refuse("MissingBatch", id) end
  if closed == "1" then
    record(ctx, "0")
    return applied("BatchClosing", fmt(ctx, now), "0")
  end
  redis.call("HSET", k, "cl", "1", "ca", fmt(ctx, now))
  record(ctx, "1")
  ctx.batches = {[id] = true}
  return fire_due(ctx, applied("BatchClosing", fmt(ctx, now), "1"))
end

return run_call(KEYS, ARGV, main)
