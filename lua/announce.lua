-- announce: a live worker's entry in the registry, written on its heartbeat cadence (not per
-- job): its hash KEYS[1].."worker:"..id, which lapses `ttl` ms after this call unless announced
-- again, and its member of KEYS[1].."workers", scored by that same deadline. A dead worker's
-- entry lapses by itself; this call and workers.lua also drop every member whose deadline has
-- passed, so the registry holds the live workers and no more.
-- Checks, in order: InvalidJob (the ttl: 1 s to 1 h; the pid and concurrency: nonnegative
-- integers; the queue names; processed, then failed, when given: nonnegative integers; the other
-- fields' lengths; the worker id: 1-256 bytes, no whitespace); the registry's key types
-- (CorruptKey).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused: announcing again is harmless)   ARGV[2] now ("" = server clock)
-- ARGV[3]  worker id   ARGV[4] ttl ms   ARGV[5] host   ARGV[6] pid
-- ARGV[7]  queues, space-separated   ARGV[8] concurrency   ARGV[9] running job ids,
-- space-separated   ARGV[10] version   ARGV[11] runs it ended since it started (optional)
-- ARGV[12] of which failed (optional)
--
-- Replies
--   {"Announced", now}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- Hash fields: h host, p pid, q queues, c concurrency, r running job ids, v version,
-- sa started at (the first announce since the entry last lapsed), ls last seen (now),
-- np / nf runs ended / failed since the worker started (its own counts: no write per job).

-- uses: core, checks, call
local applied, clock, fmt, int, invalid = Core.applied, Core.clock, Core.fmt, Core.int, Core.invalid
local split = Core.split
local check_types, id_error, name_error = Checks.check_types, Checks.id_error, Checks.name_error
local text_error = Checks.text_error
local run_call = Call.run_call

local TTL_MIN, TTL_MAX = 1000, 3600000

-- The registry's keys, type-checked: the set of live workers and, given a worker id, that
-- worker's hash; or nil and a refusal (an id that cannot name a key, a key of another type).
-- Once they passed, the members whose entry lapsed before `now` are dropped (their hashes lapse
-- by themselves).
local function registry_keys(ctx, now, id)
  local workers, k = ctx.prefix .. "workers", nil
  local bad = check_types(ctx, {workers}, "zset")
  if id then
    k = ctx.prefix .. "worker:" .. id
    bad = bad or (id == "" and invalid("worker_id must not be empty"))
      or id_error(id, "worker_id") or check_types(ctx, {k}, "hash")
  end
  if bad then return nil, bad end
  redis.call("ZREMRANGEBYSCORE", workers, "-inf", fmt(ctx, now))
  return workers, k
end

local function announce_error(ctx)
  local args = ctx.args
  local ttl = int(args[4])
  if ttl == nil or ttl < TTL_MIN or ttl > TTL_MAX then
    return invalid("ttl must be between " .. TTL_MIN .. " and " .. TTL_MAX .. " ms")
  end
  local pid, concurrency = int(args[6]), int(args[8])
  if pid == nil or pid < 0 then return invalid("pid must be a nonnegative integer") end
  if concurrency == nil or concurrency < 0 then
    return invalid("concurrency must be a nonnegative integer")
  end
  for _, queue in ipairs(split(args[7])) do
    local bad = name_error(queue, "queue")
    if bad then return bad end
  end
  for i, name in ipairs({"processed", "failed"}) do
    local given = args[10 + i] or ""
    if given ~= "" and (int(given) == nil or int(given) < 0) then
      return invalid(name .. " must be a nonnegative integer")
    end
  end
  return text_error(args[5], "host") or text_error(args[7], "queues")
    or text_error(args[10], "version")
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local bad = announce_error(ctx)
  if bad then return bad end
  local id = args[3]
  local workers, k = registry_keys(ctx, now, id)
  if workers == nil then return k end
  local ttl, now_text = args[4], fmt(ctx, now)
  redis.call("HSET", k, "h", args[5], "p", args[6], "q", args[7], "c", args[8], "r", args[9],
    "v", args[10], "ls", now_text)
  redis.call("HSETNX", k, "sa", now_text)
  if (args[11] or "") ~= "" then redis.call("HSET", k, "np", args[11], "nf", args[12] or "0") end
  redis.call("PEXPIRE", k, ttl)
  redis.call("ZADD", workers, fmt(ctx, now + tonumber(ttl)), id)
  return applied("Announced", now_text)
end

return run_call(KEYS, ARGV, main)
