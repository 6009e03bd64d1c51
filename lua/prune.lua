-- prune: delete the Succeeded jobs whose result retention ran out (`expiring`, due by now: a task's
-- result_ttl, see complete.lua), then finished jobs (Succeeded, Failed, Cancelled) older than
-- max_age, and the oldest beyond max_count per queue and state, at most `limit` deletions per
-- call; never one finished in the last CALL_TTL_MS (60 s), so that a re-sent call still finds it.
-- A finished job that a blocked job still depends on is never pruned (the blocked job names it
-- when it says what it waits on; a Failed one may still be retried by an operator and let it
-- run): a retained one is looked at again CALL_TTL_MS later. A job is deleted with its failure
-- history, its dependents set and its dedup key's entry, while that still names it (unique.lua).
-- Then, with what is left of `limit`, the batches done (closed, every member ended: their
-- callbacks fired) before max_age and CALL_TTL_MS ago, oldest first (KEYS[1].."batches_done",
-- include/callbacks.lua): each one's hash and member list go with UNLINK (Redis frees a long
-- list in the background) and its entry leaves the index. With no max age, batches are kept.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] max age ms ("" = no age limit)
-- ARGV[4]  max count per queue and state ("" = no count limit)   ARGV[5] limit (1..10000)
--
-- Replies
--   {"Pruned", now, count}   count: the jobs and batches deleted
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, checks, job, call, unique
local applied, CALL_TTL_MS, clock, fmt = Core.applied, Core.CALL_TTL_MS, Core.clock, Core.fmt
local int, invalid, key_dependents = Core.int, Core.invalid, Core.key_dependents
local key_errors, key_job, key_q = Core.key_errors, Core.key_job, Core.key_q
local key_batch, key_members = Core.key_batch, Core.key_members
local key_batches_done = Core.key_batches_done
local key_queues, NAME_MAX, split = Core.key_queues, Core.NAME_MAX, Core.split
local TERMINAL = Core.TERMINAL
local check_queue, check_types = Checks.check_queue, Checks.check_types
local valid_name = Checks.valid_name
local blocked, load_job = Job.blocked, Job.load_job
local run_call = Call.run_call
local unique_forget = Unique.unique_forget

local FINISHED_SETS = {"succeeded", "failed", "cancelled", "expired"}

-- Deleting a finished job, a step purge.lua takes too: one table, so that the function library
-- declares one name for it (Lua allows a function 200 locals, and the library is one).
-- LOOK_MAX: dependents a call looks at, in all, to tell whether finished jobs are still needed;
-- LOOK_SET: of one job's dependents.
local finished_jobs = {LOOK_MAX = 1000, LOOK_SET = 100}

-- A finished job that a blocked job still depends on stays (the blocked job names its
-- dependencies when it says what it waits on, and a Failed one may still be retried), and so
-- does one whose cascade is not done (`cw`: its dependents not yet reached are blocked on it).
-- Bounded: a dependents set of up to LOOK_SET members is read whole; from a larger one LOOK_SET
-- are taken out (SPOP) and those still blocked put back, so the dependents that no longer need
-- the job (finished, released, gone) leave it over successive prunes and it is pruned once none
-- is left; meanwhile it counts as needed. limits.looks: what the call may still look at (a job
-- with dependents counts as needed once it is spent: the next prune looks again).
function finished_jobs.needed(ctx, id, h, limits)
  if h.cw then return true end
  if not h.hd then return false end
  local k = key_dependents(ctx, id)
  local n = redis.call("SCARD", k)
  if math.min(n, finished_jobs.LOOK_SET) > limits.looks then return true end
  local whole = n <= finished_jobs.LOOK_SET
  local ids = whole and redis.call("SMEMBERS", k)
    or redis.call("SPOP", k, finished_jobs.LOOK_SET)
  limits.looks = limits.looks - #ids
  local keep = {}
  for _, did in ipairs(ids) do
    local d = load_job(ctx, did)
    if d and d.st == "W" and blocked(d) then
      if whole then return true end
      keep[#keep + 1] = did
    end
  end
  if whole then return false end
  if keep[1] then redis.call("SADD", k, unpack(keep)) end
  return true
end

function finished_jobs.delete(ctx, id, h)
  for _, dep in ipairs(split(h.dp or "")) do redis.call("SREM", key_dependents(ctx, dep), id) end
  redis.call("DEL", key_job(ctx, id), key_dependents(ctx, id), key_errors(ctx, id))
  if h.uq then unique_forget(ctx, id, h.uq) end
  if h.st == "S" then redis.call("ZREM", key_q(ctx, h.q, "expiring"), id) end
end

-- The due entries of the queue's `expiring` (at most budget): a Succeeded job is deleted, or
-- looked at again later while a blocked job depends on it; any other entry (a job gone, damaged
-- or no longer Succeeded) only leaves the index.
local function expire_retained(ctx, queue, now, budget, limits)
  local key, pruned = key_q(ctx, queue, "expiring"), 0
  for _, id in ipairs(redis.call("ZRANGEBYSCORE", key, "-inf", fmt(ctx, now), "LIMIT", 0, budget)) do
    local h = load_job(ctx, id)
    if h and h.st == "S" and finished_jobs.needed(ctx, id, h, limits) then
      redis.call("ZADD", key, fmt(ctx, now + CALL_TTL_MS), id)
    elseif h and h.st == "S" then
      finished_jobs.delete(ctx, id, h)
      redis.call("ZREM", key_q(ctx, queue, "succeeded"), id)
      pruned = pruned + 1
    else
      redis.call("ZREM", key, id)
    end
  end
  return pruned
end

-- Candidates: those over the count first (oldest), then those over the age.
local function candidates(ctx, key, cutoff, max_count, budget)
  local ids = {}
  if max_count then
    local over = redis.call("ZCARD", key) - max_count
    if over > 0 then ids = redis.call("ZRANGE", key, 0, math.min(over, budget) - 1) end
  end
  if cutoff and #ids < budget then
    local old = redis.call("ZRANGEBYSCORE", key, "-inf", "(" .. fmt(ctx, cutoff), "LIMIT", #ids,
      budget - #ids)
    for _, id in ipairs(old) do ids[#ids + 1] = id end
  end
  return ids
end

-- guard: jobs finished after it stay whatever the limits (the re-send window, CALL_TTL_MS).
local function prune_set(ctx, key, limits, budget)
  local pruned = 0
  for _, id in ipairs(candidates(ctx, key, limits.cutoff, limits.count, budget)) do
    local h, err = load_job(ctx, id)
    if h == nil and err[1] == "MissingJob" then
      redis.call("ZREM", key, id)
    elseif h and TERMINAL[h.st] and tonumber(h.fin) < limits.guard
        and not finished_jobs.needed(ctx, id, h, limits) then
      finished_jobs.delete(ctx, id, h)
      redis.call("ZREM", key, id)
      pruned = pruned + 1
    end
  end
  return pruned
end

-- The done batches of the index older than cutoff (at most budget), oldest first: deleted,
-- unless the batch is no longer done (not closed, or a member pending), which only leaves the
-- index (the batch scripts keep it right; this keeps a stray entry from holding up the rest).
local function prune_batches(ctx, cutoff, budget)
  local index, pruned = key_batches_done(ctx), 0
  local ids = redis.call("ZRANGEBYSCORE", index, "-inf", "(" .. fmt(ctx, cutoff), "LIMIT", 0, budget)
  for _, id in ipairs(ids) do
    local k = key_batch(ctx, id)
    local b = redis.call("TYPE", k).ok == "hash"
      and redis.call("HMGET", k, "cl", "n", "nS", "nF", "nC", "nE") or {}
    local ended = 0
    for i = 3, 6 do ended = ended + (tonumber(b[i] or "0") or 0) end
    if b[1] == "1" and ended >= (tonumber(b[2]) or 0) then
      redis.call("UNLINK", k, key_members(ctx, id))
      pruned = pruned + 1
    end
    redis.call("ZREM", index, id)
  end
  return pruned
end

local function optional_int(s, what)
  if s == "" then return false end
  local n = int(s)
  if n == nil or n < 0 then return nil, invalid(what .. " must be a nonnegative integer") end
  return n
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local max_age, e1 = optional_int(args[3], "max_age")
  if max_age == nil then return e1 end
  local max_count, e2 = optional_int(args[4], "max_count")
  if max_count == nil then return e2 end
  local limit = int(args[5])
  if limit == nil or limit < 1 or limit > 10000 then
    return invalid("limit must be between 1 and 10000")
  end
  local bad = check_types(ctx, {key_queues(ctx)}, "set")
    or check_types(ctx, {key_batches_done(ctx)}, "zset")
  if bad then return bad end
  -- Never a job finished within the re-send window: a re-sent call must still find it.
  local limits = {
    cutoff = max_age and math.min(now - max_age, now - CALL_TTL_MS) or nil,
    count = max_count or nil,
    guard = now - CALL_TTL_MS,
    looks = finished_jobs.LOOK_MAX,
  }
  local pruned = 0
  for _, queue in ipairs(redis.call("SMEMBERS", key_queues(ctx))) do
    if valid_name(queue, NAME_MAX) and check_queue(ctx, queue) == nil and pruned < limit then
      pruned = pruned + expire_retained(ctx, queue, now, limit - pruned, limits)
      for _, what in ipairs(FINISHED_SETS) do
        if pruned >= limit then break end
        pruned = pruned + prune_set(ctx, key_q(ctx, queue, what), limits, limit - pruned)
      end
    end
  end
  if limits.cutoff and pruned < limit then
    pruned = pruned + prune_batches(ctx, limits.cutoff, limit - pruned)
  end
  return applied("Pruned", fmt(ctx, now), fmt(ctx, pruned))
end

return run_call(KEYS, ARGV, main)
