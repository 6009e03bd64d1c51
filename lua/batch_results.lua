-- batch_results (read only): a page of a batch's members, in the order they joined: each as
-- it is stored (its status, result and last error), or its id alone when it is gone (pruned or
-- purged) or damaged. At most 1000 members a call: page on with start.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] batch id
-- ARGV[4]  start (0-based index of the first member)   ARGV[5] count (1-1000)
--
-- Replies
--   {"BatchPage", now, total, job...}   total: the batch's members; job: {id, field, value,
--                                       ...} (as get_job's), or {id}
--   {"MissingBatch", id} | {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, job, call, batches
local fmt, int, invalid = Core.fmt, Core.int, Core.invalid
local key_batch, key_members, refuse = Core.key_batch, Core.key_members, Core.refuse
local job_reply, load_job = Job.job_reply, Job.load_job
local run_call = Call.run_call
local batch_args = Batches.batch_args

local PAGE_MAX = 1000

local function main(ctx)
  local now, id = batch_args(ctx)
  if now == nil then return id end
  local start, count = int(ctx.args[4]), int(ctx.args[5])
  if start == nil or start < 0 then return invalid("start must be a nonnegative integer") end
  if count == nil or count < 1 or count > PAGE_MAX then
    return invalid("count must be between 1 and " .. PAGE_MAX)
  end
  local total = redis.call("HMGET", key_batch(ctx, id), "n")[1]
  if not total then return refuse("MissingBatch", id) end
  local out = {"BatchPage", fmt(ctx, now), total}
  local ids = redis.call("LRANGE", key_members(ctx, id), fmt(ctx, start), fmt(ctx, start + count - 1))
  for _, job_id in ipairs(ids) do
    local h = load_job(ctx, job_id)
    out[#out + 1] = h and job_reply(ctx, job_id, h) or {job_id}
  end
  return out
end

return run_call(KEYS, ARGV, main)
