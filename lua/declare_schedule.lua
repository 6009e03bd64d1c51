-- declare_schedule: a periodic schedule written, or updated in place (an upsert), by the workers
-- whose application declares it (docs/schedules.md). New: created with its first tick (computed
-- by the caller: Lua has no cron parser) and unpaused. Same settings (the same digest): only
-- its declaration time is refreshed. Other settings: they replace the old ones and the schedule
-- goes to the next tick of the new ones (paused and last tick kept). Idempotent.
-- Checks, in order: InvalidJob (the schedule's name, the queue's, the stage, the spec, the time
-- zone, the payload's size, priority, max_attempts, missed, grace, the next tick, the digest);
-- the types of the schedule's keys (CorruptKey).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] schedule name   ARGV[4] digest
-- ARGV[5]  spec   ARGV[6] tz   ARGV[7] queue   ARGV[8] stage   ARGV[9] payload
-- ARGV[10] priority   ARGV[11] max_attempts   ARGV[12] missed ("skip" | "once")
-- ARGV[13] grace (ms)   ARGV[14] next tick (ms)   ARGV[15] the payload limit (bytes)
--
-- Replies
--   {"Declared", now, outcome, next}   outcome: "created", "updated" or "unchanged"; next: the
--                                     schedule's next tick (ms) now
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets the first delivery's answer again ("Declared", "", ...).

-- uses: core, checks, call, schedule
local applied, fmt, invalid, split = Core.applied, Core.fmt, Core.invalid, Core.split
local key_schedule, key_schedules = Core.key_schedule, Core.key_schedules
local PRIORITY_MAX, PRIORITY_MIN = Core.PRIORITY_MAX, Core.PRIORITY_MIN
local int_arg, name_error, stage_error = Checks.int_arg, Checks.name_error, Checks.stage_error
local text_error, time_error = Checks.text_error, Checks.time_error
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local open_schedule = Schedule.open_schedule

-- The integer ARGV[i], at least `min` (and at most `max` when given), or nil and a refusal.
local function bounded_arg(ctx, i, what, min, max)
  local n, e = int_arg(ctx.args[i], what)
  if n == nil then return nil, e end
  if n < min or (max and n > max) then
    return nil, invalid(what .. " must be between " .. min .. " and " .. (max or "2^50"))
  end
  return n
end

local function settings_error(ctx)
  local args = ctx.args
  local bad = name_error(args[7], "queue")
  if bad then return bad end
  if args[8] == "" then return invalid("stage must not be empty") end
  bad = stage_error(args[8])
  if bad then return bad end
  if args[5] == "" or args[6] == "" then return invalid("spec and tz must not be empty") end
  bad = text_error(args[5], "spec") or text_error(args[6], "tz")
  if bad then return bad end
  local limit = tonumber(args[15]) or 0
  if #args[9] > limit then
    return invalid("payload is " .. #args[9] .. " bytes, over the limit of " .. limit)
  end
  if args[12] ~= "skip" and args[12] ~= "once" then
    return invalid("missed must be 'skip' or 'once'")
  end
  if args[4] == "" then return invalid("digest must not be empty") end
  local checks = {{10, "priority", PRIORITY_MIN, PRIORITY_MAX}, {11, "max_attempts", 1},
    {13, "grace", 0}, {14, "next tick", 0}}
  for _, c in ipairs(checks) do
    local n, e = bounded_arg(ctx, c[1], c[2], c[3], c[4])
    if n == nil then return e end
  end
  return time_error(int_arg(args[14], "next tick"), "next tick")
end

local function main(ctx)
  local now, name = open_schedule(ctx)
  if now == nil then return name end
  local bad = settings_error(ctx)
  if bad then return bad end
  local again = recorded(ctx)
  if again then return applied("Declared", "", unpack(split(again))) end
  local args, key, now_text = ctx.args, key_schedule(ctx, name), fmt(ctx, now)
  local digest = redis.call("HGET", key, "dg")
  local outcome = "unchanged"
  if digest ~= args[4] then
    outcome = digest and "updated" or "created"
    redis.call("HSET", key, "spec", args[5], "tz", args[6], "q", args[7], "s", args[8],
      "p", args[9], "pr", args[10], "m", args[11], "mi", args[12], "gr", args[13], "dg", args[4],
      "nx", args[14])
    if not digest then redis.call("HSET", key, "cr", now_text) end
    redis.call("ZADD", key_schedules(ctx), args[14], name)
  end
  redis.call("HSET", key, "dc", now_text)
  local nx = redis.call("HGET", key, "nx")
  record(ctx, outcome .. " " .. nx)
  return applied("Declared", now_text, outcome, nx)
end

return run_call(KEYS, ARGV, main)
