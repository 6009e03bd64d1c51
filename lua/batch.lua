-- batch (read only): a batch's counts, whether it is closed, and its callbacks: each one's spec
-- (without its payload) and, once fired, its job id or the refusal that kept it out
-- (include/batches.lua lists the fields).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] batch id
--
-- Replies
--   {"BatchFound", now, {id, field, value, ...}}
--   {"MissingBatch", id} | {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, call, batches
local applied, fmt, refuse = Core.applied, Core.fmt, Core.refuse
local run_call = Call.run_call
local batch_args, batch_reply, load_batch = Batches.batch_args, Batches.batch_reply, Batches.load_batch

local function main(ctx)
  local now, id = batch_args(ctx)
  if now == nil then return id end
  local b = load_batch(ctx, id)
  if b == nil then return refuse("MissingBatch", id) end
  return applied("BatchFound", fmt(ctx, now), batch_reply(id, b))
end

return run_call(KEYS, ARGV, main)
