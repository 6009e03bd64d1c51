-- schedule.lua: what the schedule scripts share (declare_schedule, fire_schedule,
-- change_schedule, schedules): the opening of a call naming one schedule, and its hash's fields.
--
-- A schedule (docs/schedules.md) is the hash KEYS[1].."schedule:"..name, its name a queue-like
-- name (no '@': a fired job's id is "<name>@<tick ms>"), and a member of the sorted set
-- KEYS[1].."schedules" scored by its next tick. Its fields: spec (the cron expression, or
-- "every <ms>"), tz, q queue, s stage, p payload, pr priority, m max_attempts, mi what a late
-- tick does ("skip" | "once"), gr how late (ms) a tick may fire under "skip", dg the digest of
-- these settings, nx next tick (ms), ls last tick fired or skipped ("" none), ps "1" paused,
-- dc declared at (ms, refreshed by every worker that declares it), cr created at, lj the id of
-- the job of its last tick fired.

-- uses: core, checks
local clock, key_schedule, key_schedules = Core.clock, Core.key_schedule, Core.key_schedules
local check_types, name_error = Checks.check_types, Checks.name_error

local SCHEDULE_FIELDS = {"spec", "tz", "q", "s", "pr", "m", "mi", "gr", "dg", "nx", "ls", "ps",
  "dc", "cr", "lj"}

-- The opening of every schedule call: now and the schedule's name (ARGV[3]), checked, and the
-- types of its keys; or nil and a refusal.
local function open_schedule(ctx)
  local now, e = clock(ctx.args[2])
  if now == nil then return nil, e end
  local name = ctx.args[3]
  local bad = name_error(name, "schedule name")
    or check_types(ctx, {key_schedules(ctx)}, "zset")
    or check_types(ctx, {key_schedule(ctx, name)}, "hash")
  if bad then return nil, bad end
  return now, name
end

-- The schedule's fields by name (SCHEDULE_FIELDS), or nil when it does not exist.
local function load_schedule(ctx, name)
  local values = redis.call("HMGET", key_schedule(ctx, name), unpack(SCHEDULE_FIELDS))
  if not values[1] then return nil end
  local h = {}
  for i, f in ipairs(SCHEDULE_FIELDS) do h[f] = values[i] or "" end
  return h
end

