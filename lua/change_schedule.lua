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

-- Each action: its writes to the schedule (hash `key`), and 1 when they changed it, else 0.
local ACTIONS = {
  pause = function(_, key) return redis.call("HSET", key, "ps", "1") end,
  resume = function(_, key) return redis.call("HDEL", key, "ps") end,
  remove = function(ctx, key, name)
    redis.call("ZREM", key_schedules(ctx), name)
    return redis.call("DEL", key)
  end,
}

local function main(ctx)
  local now, name = open_schedule(ctx)
  if now == nil then return name end
  local act = ACTIONS[ctx.args[4]]
  if not act then return invalid("action must be 'pause', 'resume' or 'remove'") end
  local again = recorded(ctx)
  if again then return applied("Changed", "", again) end
  local key = key_schedule(ctx, name)
  if redis.call("EXISTS", key) == 0 then
    return invalid("unknown schedule '" .. name .. "'")
  end
  local changed = fmt(ctx, act(ctx, key, name))
  record(ctx, changed)
  return applied("Changed", fmt(ctx, now), changed)
end

return run_call(KEYS, ARGV, main)
