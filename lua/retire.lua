-- retire: a worker that stops takes its entry out of the registry (announce.lua) at once,
-- rather than letting it lapse. Idempotent.
-- Checks, in order: InvalidJob (the worker id); the registry's key types (CorruptKey).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] worker id
--
-- Replies
--   {"Retired", now, removed}   removed: "1" when the worker had an entry, else "0"
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, call, announce
local applied, clock, fmt = Core.applied, Core.clock, Core.fmt
local run_call = Call.run_call
local registry_keys = Announce.registry_keys

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local workers, k = registry_keys(ctx, now, args[3])
  if workers == nil then return k end
  local removed = redis.call("ZREM", workers, args[3])
  redis.call("DEL", k)
  return applied("Retired", fmt(ctx, now), fmt(ctx, removed))
end

return run_call(KEYS, ARGV, main)
