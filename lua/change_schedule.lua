-- change_schedule: an operator's change of a periodic schedule (docs/schedules.md): "pause" (no
-- tick of it fires until "resume"; a trigger still does), "resume" (its ticks fire again, those
-- missed meanwhile as its "missed" setting says), "remove" (its hash and its place among the
-- schedules deleted; a worker that still declares it writes it again). Idempotent.
-- Checks, in order: InvalidJob (the name, the action, a schedule that does not exist); the types
-- of the schedule's keys (CorruptKey).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] schedule name
-- ARGV[4]  action: "pause" | "resume" | "remove"
--
-- Replies
--   {"Changed", now, changed}   changed: "1" when the schedule changed, else "0"
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets the first delivery's answer again ("Changed", "", changed).

-- uses: core, call, schedule
local applied, fmt, invalid = Core.applied, Core.fmt, Core.invalid
local key_schedule, key_schedules = Core.key_schedule, Core.key_schedules
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local open_schedule = Schedule.open_schedule

local ACTIONS = {pause = true, resume = true, remove = true}

local function main(ctx)
  local now, name = open_schedule(ctx)
  if now == nil then return name end
  local action = ctx.args[4]
  if not ACTIONS[action] then return invalid("action must be 'pause', 'resume' or 'remove'") end
  local again = recorded(ctx)
  if again then return applied("Changed", "", again) end
  local key = key_schedule(ctx, name)
  if redis.call("EXISTS", key) == 0 then
    return invalid("unknown schedule '" .. name .. "'")
  end
  local changed
  if action == "pause" then
    changed = redis.call("HSET", key, "ps", "1")
  elseif action == "resume" then
    changed = redis.call("HDEL", key, "ps")
  else
    redis.call("ZREM", key_schedules(ctx), name)
    changed = redis.call("DEL", key)
  end
  changed = fmt(ctx, changed)
  record(ctx, changed)
  return applied("Changed", fmt(ctx, now), changed)
end

return run_call(KEYS, ARGV, main)
