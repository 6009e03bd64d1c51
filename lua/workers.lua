-- workers: the live workers of the namespace (announce.lua), by worker id. Drops the members
-- whose entry lapsed first (a dead worker is gone from the reply once its ttl has passed, even
-- if no live worker announces meanwhile); nothing else is written.
-- Checks: the registry's key type (CorruptKey); a worker hash of another type is left out.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)
--
-- Replies
--   {"Workers", now, {id, host, pid, queues, concurrency, running, version, started_at,
--    last_seen, processed, failed}...}   queues and running space-separated; processed and
--    failed: the runs it ended and those that failed, as it last announced ("0" if it did not)
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, call, announce
local clock, fmt = Core.clock, Core.fmt
local run_call = Call.run_call
local registry_keys = Announce.registry_keys

local WORKER_FIELDS = {"h", "p", "q", "c", "r", "v", "sa", "ls", "np", "nf"}

local function main(ctx)
  local now, e = clock(ctx.args[2])
  if now == nil then return e end
  local workers, bad = registry_keys(ctx, now)
  if workers == nil then return bad end
  local out = {"Workers", fmt(ctx, now)}
  local ids = redis.call("ZRANGE", workers, "0", "-1")
  table.sort(ids)
  for _, id in ipairs(ids) do
    -- (the hash registry_keys names; one of another type, or without a host or a last seen,
    -- was not written by announce.lua: left out)
    local v = redis.pcall("HMGET", ctx.prefix .. "worker:" .. id, unpack(WORKER_FIELDS))
    if not v.err and v[1] and v[8] then
      out[#out + 1] = {id, v[1], v[2] or "0", v[3] or "", v[4] or "0", v[5] or "", v[6] or "",
        v[7] or v[8], v[8], v[9] or "0", v[10] or "0"}
    end
  end
  return out
end

return run_call(KEYS, ARGV, main)
