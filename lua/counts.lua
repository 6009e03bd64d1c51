-- counts (read only): how many jobs of a queue are in each status, at the server's now.
-- Available = waiting with available_at <= now; Scheduled = waiting with available_at > now;
-- Retryable = retry-waiting; Executing = leased; Completed / Discarded / Cancelled = finished
-- and not yet pruned; blocked = waiting jobs with a dependency not yet succeeded (they are also
-- counted as Available or Scheduled).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] queue
--
-- Replies
--   {"Counts", now, available, scheduled, retryable, executing, completed, discarded, cancelled,
--    blocked}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

local function main()
  local now, e = clock(ARGV[2])
  if now == nil then return e end
  local queue = ARGV[3]
  local bad = name_error(queue, "queue") or check_queue(queue)
  if bad then return bad end
  local waiting = key_q(queue, "waiting")
  return applied("Counts", fmt(now),
    fmt(redis.call("ZCOUNT", waiting, "-inf", now)),
    fmt(redis.call("ZCOUNT", waiting, "(" .. fmt(now), "+inf")),
    fmt(redis.call("ZCARD", key_q(queue, "retrying"))),
    fmt(redis.call("ZCARD", key_q(queue, "leased"))),
    fmt(redis.call("ZCARD", key_q(queue, "succeeded"))),
    fmt(redis.call("ZCARD", key_q(queue, "failed"))),
    fmt(redis.call("ZCARD", key_q(queue, "cancelled"))),
    fmt(redis.call("ZCARD", key_q(queue, "blocked"))))
end

return finish(main())
