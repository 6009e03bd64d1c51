-- purge: delete finished jobs of one queue, by id: an operator's purge of a queue's Completed,
-- Discarded, Cancelled or Expired jobs, a batch at a time (the caller pages the queue's jobs in that
-- status with `list` and sends their ids). Each id is looked at on its own: its job is deleted
-- only while it is still of this queue, in the named finished state, finished before `before`
-- and not within the last CALL_TTL_MS (a re-sent call must still find it), and no blocked job
-- depends on it (prune.lua's rule, and its finished_jobs steps); any other id is left as it is
-- and not counted. A job already gone counts as nothing.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] queue
-- ARGV[4]  status: completed | discarded | cancelled | expired
-- ARGV[5]  finished before (ms since the epoch; "" = no age limit)   ARGV[6..] job ids (1..1000)
--
-- Replies
--   {"Purged", now, count}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- Cost: O(B * (D + log N)) for B ids, D their dependencies and dependents.

-- uses: core, checks, job, call, prune
local applied, CALL_TTL_MS, clock, fmt = Core.applied, Core.CALL_TTL_MS, Core.clock, Core.fmt
local invalid, key_q = Core.invalid, Core.key_q
local check_queue, id_error, int_arg = Checks.check_queue, Checks.id_error, Checks.int_arg
local name_error = Checks.name_error
local load_job = Job.load_job
local run_call = Call.run_call
local finished_jobs = Prune.finished_jobs

local PURGED_STATES = {completed = {"S", "succeeded"}, discarded = {"F", "failed"},
  cancelled = {"C", "cancelled"}, expired = {"E", "expired"}}
local PURGE_MAX = 1000

local function purge_args(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return nil, e end
  local bad = name_error(args[3], "queue")
  if bad then return nil, bad end
  local state = PURGED_STATES[args[4]]
  if state == nil then
    return nil, invalid("status must be completed, discarded, cancelled or expired")
  end
  local before = now - CALL_TTL_MS
  if args[5] ~= "" then
    local given, e2 = int_arg(args[5], "before")
    if given == nil then return nil, e2 end
    before = math.min(before, given)
  end
  if #args < 6 or #args - 5 > PURGE_MAX then
    return nil, invalid("give 1 to " .. PURGE_MAX .. " job ids")
  end
  return {now = now, queue = args[3], state = state, before = before}
end

local function main(ctx)
  local p, e = purge_args(ctx)
  if p == nil then return e end
  local bad = check_queue(ctx, p.queue)
  if bad then return bad end
  local key, purged = key_q(ctx, p.queue, p.state[2]), 0
  local limits = {looks = finished_jobs.LOOK_MAX}
  for i = 6, #ctx.args do
    local id = ctx.args[i]
    local h = id_error(id, "job id") == nil and load_job(ctx, id)
    if h and h.q == p.queue and h.st == p.state[1] and tonumber(h.fin) < p.before
        and not finished_jobs.needed(ctx, id, h, limits) then
      finished_jobs.delete(ctx, id, h)
      redis.call("ZREM", key, id)
      purged = purged + 1
    end
  end
  return applied("Purged", fmt(ctx, p.now), fmt(ctx, purged))
end

return run_call(KEYS, ARGV, main)
