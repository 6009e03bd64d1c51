-- counts (read only): how many jobs of a queue are in each status, at the server's now.
-- Available = waiting with available_at <= now; Scheduled = waiting with available_at > now;
-- Retryable = retry-waiting; Executing = leased; Completed / Discarded / Cancelled = finished
-- and not yet pruned; blocked = waiting jobs with a dependency not yet succeeded (they are also
-- counted as Available or Scheduled).
-- Derived from the indexes (see _lib.lua): every W job is in exactly one of ready / delayed /
-- blocked, every R job in retrying and in one of ready / delayed; R jobs in delayed are those
-- not yet due.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] queue
--
-- Replies
--   {"Counts", now, available, scheduled, retryable, executing, completed, discarded, cancelled,
--    blocked}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

local function main()
  local now, e = clock(ARGS[2])
  if now == nil then return e end
  local queue = ARGS[3]
  local bad = name_error(queue, "queue") or check_queue(queue)
  if bad then return bad end
  local later = "(" .. fmt(now)
  local retrying = redis.call("ZCARD", key_q(queue, "retrying"))
  local blocked = redis.call("ZCARD", key_q(queue, "blocked"))
  local waiting = redis.call("ZCARD", key_q(queue, "ready")) + blocked
    + redis.call("ZCARD", key_q(queue, "delayed")) - retrying
  local scheduled = redis.call("ZCOUNT", key_q(queue, "delayed"), later, "+inf")
    - redis.call("ZCOUNT", key_q(queue, "retrying"), later, "+inf")
    + redis.call("ZCOUNT", key_q(queue, "blocked"), later, "+inf")
  scheduled = math.max(0, math.min(scheduled, waiting))
  return applied("Counts", fmt(now),
    fmt(math.max(0, waiting - scheduled)),
    fmt(scheduled),
    fmt(retrying),
    fmt(redis.call("ZCARD", key_q(queue, "leased"))),
    fmt(redis.call("ZCARD", key_q(queue, "succeeded"))),
    fmt(redis.call("ZCARD", key_q(queue, "failed"))),
    fmt(redis.call("ZCARD", key_q(queue, "cancelled"))),
    fmt(blocked))
end

return run_call(KEYS, ARGV, main)
