-- counts (read only): how many jobs of a queue are in each status, at the server's now; each job
-- in exactly one. Blocked = waiting with a dependency not yet succeeded; Available = the other
-- waiting and retry-waiting jobs with available_at <= now (what a claim may lease now: their time
-- has come); Scheduled = the other waiting jobs with available_at > now; Retryable = the
-- retry-waiting jobs with available_at > now; Executing = leased; Completed / Discarded /
-- Cancelled / Expired = finished and not yet pruned.
-- Derived from the indexes (see include/job.lua): every W job is in exactly one of ready / delayed /
-- blocked, every R job in retrying and in one of ready / delayed; the jobs of ready, and those of
-- delayed due at now, are available.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] queue
--
-- Replies
--   {"Counts", now, available, scheduled, retryable, executing, completed, discarded, cancelled,
--    blocked, expired}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, checks, call
local applied, clock, fmt, key_q = Core.applied, Core.clock, Core.fmt, Core.key_q
local check_queue, name_error = Checks.check_queue, Checks.name_error
local run_call = Call.run_call

-- The counts of a sound queue at `now`, as the reply lists them (queues.lua lists them too).
local function queue_counts(ctx, queue, now)
  local later = "(" .. fmt(ctx, now)
  local delayed = key_q(ctx, queue, "delayed")
  local blocked_jobs = redis.call("ZCARD", key_q(ctx, queue, "blocked"))
  local retryable = redis.call("ZCOUNT", key_q(ctx, queue, "retrying"), later, "+inf")
  local waiting = redis.call("ZCARD", key_q(ctx, queue, "ready")) + redis.call("ZCARD", delayed)
    - retryable
  local scheduled_jobs = redis.call("ZCOUNT", delayed, later, "+inf") - retryable
  scheduled_jobs = math.max(0, math.min(scheduled_jobs, waiting))
  return {
    fmt(ctx, math.max(0, waiting - scheduled_jobs)),
    fmt(ctx, scheduled_jobs),
    fmt(ctx, retryable),
    fmt(ctx, redis.call("ZCARD", key_q(ctx, queue, "leased"))),
    fmt(ctx, redis.call("ZCARD", key_q(ctx, queue, "succeeded"))),
    fmt(ctx, redis.call("ZCARD", key_q(ctx, queue, "failed"))),
    fmt(ctx, redis.call("ZCARD", key_q(ctx, queue, "cancelled"))),
    fmt(ctx, blocked_jobs),
    fmt(ctx, redis.call("ZCARD", key_q(ctx, queue, "expired"))),
  }
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local queue = args[3]
  local bad = name_error(queue, "queue") or check_queue(ctx, queue)
  if bad then return bad end
  return applied("Counts", fmt(ctx, now), unpack(queue_counts(ctx, queue, now)))
end

return run_call(KEYS, ARGV, main)
