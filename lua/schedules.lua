-- schedules (read only): the periodic schedules of the namespace (docs/schedules.md), by next
-- tick, at most 1000: each one's settings and state, for the CLI and the dashboard (whether a
-- running worker still declares it is read from its declaration time, in Python).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)
--
-- Replies
--   {"Schedules", now, {name, spec, tz, q, s, pr, m, mi, gr, dg, nx, ls, ps, dc, cr, lj}...}
--   (the fields of include/schedule.lua's SCHEDULE_FIELDS after the name; "" where unset)
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, checks, call, schedule
local applied, clock, fmt, NAME_MAX = Core.applied, Core.clock, Core.fmt, Core.NAME_MAX
local key_schedule, key_schedules = Core.key_schedule, Core.key_schedules
local check_types, valid_name = Checks.check_types, Checks.valid_name
local run_call = Call.run_call
local load_schedule, SCHEDULE_FIELDS = Schedule.load_schedule, Schedule.SCHEDULE_FIELDS

local LIST_MAX = 1000

local function main(ctx)
  local now, e = clock(ctx.args[2])
  if now == nil then return e end
  local bad = check_types(ctx, {key_schedules(ctx)}, "zset")
  if bad then return bad end
  local out = {"Schedules", fmt(ctx, now)}
  for _, name in ipairs(redis.call("ZRANGE", key_schedules(ctx), "0", LIST_MAX - 1)) do
    -- (a name written by hand, or a key of another type: left out)
    if valid_name(name, NAME_MAX) and redis.call("TYPE", key_schedule(ctx, name))["ok"] == "hash" then
      local h = load_schedule(ctx, name)
      if h then
        local row = {name}
        for _, f in ipairs(SCHEDULE_FIELDS) do row[#row + 1] = h[f] end
        out[#out + 1] = row
      end
    end
  end
  return out
end

return run_call(KEYS, ARGV, main)
