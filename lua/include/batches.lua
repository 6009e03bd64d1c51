-- batches.lua: a batch (docs/workflows.md, "Batches"): its hash read and checked, a job joining
-- it, and its members counted as they enter or leave a terminal state.

-- uses: core, checks
local clock, invalid, key_batch, key_members = Core.clock, Core.invalid, Core.key_batch, Core.key_members
local key_batches_done = Core.key_batches_done
local refuse, TERMINAL = Core.refuse, Core.TERMINAL
local check_types, id_error = Checks.check_types, Checks.id_error

-- A batch's hash at KEYS[1].."batch:"..id:
--   n its members (added so far), nS nF nC nE: of them Succeeded / Failed / Cancelled / Expired
--   (absent: 0), cl "0" while open, "1" once closed, ct created at, ca closed at;
--   for each callback kind k (CALLBACKS: s on_success, f on_failure, c on_complete), its job
--   spec: k.q queue, k.s stage (absent: no callback of that kind), k.p payload, k.pr priority,
--   k.m max_attempts; once it fired: k.id the id of the job enqueued, or k.x the refusal that
--   kept it out ("<tag> <detail>"). Either is written once, ever.
-- Its members' ids, in the order they were added: the list KEYS[1].."members:"..id.
-- A member's hash holds the batch id in bt, a callback job's in cbo (core.lua).
-- A callback's job id is "<batch id>@<kind name>" (on_success ...): a batch id has at most
-- BATCH_ID_MAX bytes, so that it stays within a job id's limit.
local BATCH_ID_MAX = 240
local CALLBACKS = {{"s", "on_success"}, {"f", "on_failure"}, {"c", "on_complete"}}
local SPEC = {"q", "s", "p", "pr", "m"}

local function batch_id_error(id)
  local bad = id_error(id, "batch")
  if bad then return bad end
  if #id > BATCH_ID_MAX then return invalid("batch must be at most " .. BATCH_ID_MAX .. " bytes") end
  return nil
end

-- The types of a batch's two keys: nil, or CorruptKey.
local function batch_types_error(ctx, id)
  return check_types(ctx, {key_batch(ctx, id)}, "hash")
    or check_types(ctx, {key_members(ctx, id)}, "list")
end

-- The opening of the batch scripts: now (ARGV[2]) and the batch id (ARGV[3]), checked with the
-- types of its keys; or nil and a refusal.
local function batch_args(ctx)
  local now, e = clock(ctx.args[2])
  if now == nil then return nil, e end
  local id = ctx.args[3] or ""
  local bad = batch_id_error(id) or batch_types_error(ctx, id)
  if bad then return nil, bad end
  return now, id
end

-- Whether a job may join batch `id` now: nil, or MissingBatch, BatchClosed, InvalidJob, CorruptKey.
-- Batches found open are kept in ctx.checked (as "batch " .. id: no key holds a space there).
local function join_error(ctx, id)
  local seen = "batch " .. id
  if ctx.checked[seen] then return nil end
  local bad = batch_id_error(id) or batch_types_error(ctx, id)
  if bad then return bad end
  local closed = redis.call("HMGET", key_batch(ctx, id), "cl")[1]
  if not closed then return refuse("MissingBatch", id) end
  if closed ~= "0" then return refuse("BatchClosed", id) end
  ctx.checked[seen] = true
  return nil
end

-- Job `job_id` joins batch `id` (checked by join_error).
local function batch_join(ctx, id, job_id)
  redis.call("HINCRBY", key_batch(ctx, id), "n", "1")
  redis.call("RPUSH", key_members(ctx, id), job_id)
end

-- A member of batch `id` moved from state `before` to `after` (move, job.lua): its terminal
-- counts follow (state X's count is the field "n" .. X), and the batch is noted in ctx.batches
-- for its callbacks (Callbacks.fire_due, before the script returns). A batch key someone
-- damaged does not fail the member's move: its count is left as it is. A member leaving a
-- terminal state (an operator's retry) takes its batch out of the done ones (Callbacks.fire_due
-- puts it back, with the new time, once it is done again). A batch that is gone (pruned,
-- prune.lua) counts nothing: the member moves alone, rather than HINCRBY making a partial
-- batch hash of one count.
local function batch_counted(ctx, id, before, after)
  local k = key_batch(ctx, id)
  if redis.call("EXISTS", k) == 0 then return end
  if TERMINAL[before] then
    redis.pcall("HINCRBY", k, "n" .. before, "-1")
    if not TERMINAL[after] then redis.pcall("ZREM", key_batches_done(ctx), id) end
  end
  if TERMINAL[after] then
    redis.pcall("HINCRBY", k, "n" .. after, "1")
    local due = ctx.batches or {}
    ctx.batches = due
    due[id] = true
  end
end

-- The batch's hash as a table, or nil when it does not exist.
local function load_batch(ctx, id)
  local raw = redis.call("HGETALL", key_batch(ctx, id))
  if #raw == 0 then return nil end
  local b = {}
  for i = 1, #raw, 2 do b[raw[i]] = raw[i + 1] end
  return b
end

-- A count of the batch (absent: 0).
local function count(b, field) return tonumber(b[field] or "0") or 0 end

-- The batch as a reply: {id, field, value, ...} without the callbacks' payloads.
local function batch_reply(id, b)
  local out = {id}
  for f, v in pairs(b) do
    if string.sub(f, 2) ~= ".p" then
      out[#out + 1] = f
      out[#out + 1] = v
    end
  end
  return out
end
