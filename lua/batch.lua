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
local applied, clock, fmt, refuse = Core.applied, Core.clock, Core.fmt, Core.refuse
local run_call = Call.run_call
local batch_id_error, batch_reply = Batches.batch_id_error, Batches.batch_reply
local batch_types_error, load_batch = Batches.batch_types_error, Batches.load_batch

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local id = args[3] or ""
  local bad = batch_id_error(id) or batch_types_error(ctx, id)
  if bad then return bad end
  local b = load_batch(ctx, id)
  if b == nil then return refuse("MissingBatch", id) end
  return applied("BatchFound", fmt(ctx, now), batch_reply(id, b))
end

return run_call(KEYS, ARGV, main)
