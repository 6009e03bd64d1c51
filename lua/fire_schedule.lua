-- fire_schedule: one tick of a periodic schedule (docs/schedules.md): its job enqueued, with the
-- fixed id "<name>@<tick ms>", and the schedule moved on to its next tick, in one call. Every
-- worker of the schedule's application sends it for the same tick; the first applies, the others
-- are answered NotFired "fired" and change nothing: one job per tick, whatever the number of
-- workers. The caller computes the ticks (Lua has no cron parser) and sends the latest one due by
-- its clock; this script holds it to the server's: a tick is fired when it is at or after the
-- schedule's next tick (an earlier one was fired or skipped already) and not after now. Ticks
-- between the schedule's next tick and the one sent were missed (no worker ran then): they get
-- no job of their own. Under "skip" a tick later than grace is skipped (the schedule moves on,
-- no job); under "once" it fires, one job standing for every tick missed.
-- With no tick (ARGV[4] ""), the schedule is triggered by hand: a job "<name>@<now>" now, paused
-- or not, its ticks unchanged.
-- The job is the schedule's (queue, stage, payload, priority, max_attempts), enqueued as
-- enqueue.lua enqueues one (its check_one and write_one): the same checks, writes and events.
-- Checks, in order: InvalidJob (the name, tick, next tick, digest, id prefix); the types of the
-- schedule's keys (CorruptKey); then NotFired: "missing" (no such schedule), "changed" (its
-- settings are not the caller's: another declaration replaced them), "paused", "early" (tick
-- after now),
-- "fired" (tick before the schedule's next one); then the job's own checks as enqueue makes
-- them (a job of that id already: "duplicate" for a trigger; for a tick the schedule moves on).
--
-- KEYS[1]  namespace prefix   KEYS[2] optional: the event stream
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] schedule name
-- ARGV[4]  tick (ms; "" = trigger now)   ARGV[5] next tick after it   ARGV[6] settings digest
-- ARGV[7]  how the job's id begins: "" (one partition), or "0~" in partition 0 of a partitioned
--          namespace, where its schedules are (so the job stays in this call's partition)
--
-- Replies
--   {"Fired", now, job_id, next, fresh}   fresh: "1" a job was enqueued, "0" the tick's job
--                                        existed already
--   {"Skipped", now, next}               a tick later than grace under "skip": no job
--   {"NotFired", now, reason, next}      nothing changed; next: the schedule's ("" if missing)
--   {"InvalidJob", reason} | {"CorruptKey", key, reason} | {"CorruptJob", ...}
-- A re-sent call (same call id) gets the first delivery's Fired or Skipped again, now "".

-- uses: core, checks, call, enqueue, schedule
local applied, fmt, invalid, int = Core.applied, Core.fmt, Core.invalid, Core.int
local key_queues, key_schedule = Core.key_queues, Core.key_schedule
local key_schedules, key_seq, split = Core.key_schedules, Core.key_seq, Core.split
local time_error = Checks.time_error
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local check_one, job_args, write_one = Enqueue.check_one, Enqueue.job_args, Enqueue.write_one
local load_schedule, open_schedule = Schedule.load_schedule, Schedule.open_schedule

local function prefix_error(prefix)
  if prefix ~= "" and not string.find(prefix or "x", "^%d+~$") then
    return invalid("a job id prefix is '' or a partition's number and '~'")
  end
  return nil
end

-- The tick and next tick sent (nil, nil for a trigger), or false and a refusal.
local function tick_args(ctx)
  local args = ctx.args
  if args[4] == "" then
    local bad = prefix_error(args[7])
    if bad then return false, bad end
    return nil, nil
  end
  local tick, nx = int(args[4]), int(args[5])
  if tick == nil or tick < 0 or nx == nil or nx <= tick then
    return false, invalid("tick must be a nonnegative integer and next tick one after it")
  end
  if args[6] == "" then return false, invalid("digest must not be empty") end
  local bad = prefix_error(args[7]) or time_error(nx, "next tick")
  if bad then return false, bad end
  return tick, nx
end

-- A fired or skipped call's answer again, from its record.
local function replayed(again)
  local parts = split(again)
  if parts[1] == "S" then return applied("Skipped", "", parts[2]) end
  return applied("Fired", "", parts[2], parts[3], parts[4])
end

-- The schedule's job for `job_id`, checked as enqueue checks a job: the job's fields, or nil and
-- a refusal.
local function tick_job(ctx, name, sc, job_id, now)
  local payload = redis.call("HGET", key_schedule(ctx, name), "p") or ""
  local a = job_args({id = job_id, queue = sc.q, stage = sc.s, payload = payload,
    priority = sc.pr, max_attempts = sc.m})
  local limits = {payload = #payload, deps = 0, ints = {}, stages = {}, listed = {},
    now_text = fmt(ctx, now), none_exist = false}
  local bad = check_one(ctx, a, now, limits, {})
  return a, bad, limits
end

local function enqueue_tick(ctx, a, now, limits)
  -- (INCRBY first: a user who may not enqueue is refused it before anything is written, also
  -- on Redis 6.2, which checks each command where a script runs it)
  local seq = redis.call("INCRBY", key_seq(ctx), "1")
  redis.call("SADD", key_queues(ctx), a.queue)
  write_one(ctx, a, now, seq, limits.now_text)
end

-- The schedule moved on: `tick` is its last, `nx` its next; `job_id` its last job (nil: a skip).
local function advance(ctx, name, tick, nx, job_id)
  local key = key_schedule(ctx, name)
  redis.call("HSET", key, "ls", fmt(ctx, tick), "nx", fmt(ctx, nx))
  if job_id then redis.call("HSET", key, "lj", job_id) end
  redis.call("ZADD", key_schedules(ctx), fmt(ctx, nx), name)
end

local function trigger(ctx, name, sc, now)
  local job_id = ctx.args[7] .. name .. "@" .. fmt(ctx, now)
  local a, bad, limits = tick_job(ctx, name, sc, job_id, now)
  if bad and bad[1] == "DuplicateJob" then
    return applied("NotFired", fmt(ctx, now), "duplicate", sc.nx)
  end
  if bad then return bad end
  enqueue_tick(ctx, a, now, limits)
  record(ctx, "F " .. job_id .. " " .. sc.nx .. " 1")
  return applied("Fired", fmt(ctx, now), job_id, sc.nx, "1")
end

local function fire(ctx, name, sc, now, tick, nx)
  local next_text, now_text = fmt(ctx, nx), fmt(ctx, now)
  local reason = (sc.dg ~= ctx.args[6] and "changed") or (sc.ps == "1" and "paused")
    or (tick > now and "early") or ((int(sc.nx) or 0) > tick and "fired") or nil
  if reason then return applied("NotFired", now_text, reason, sc.nx) end
  if sc.mi == "skip" and now - tick > (int(sc.gr) or 0) then
    advance(ctx, name, tick, nx)
    record(ctx, "S " .. next_text)
    return applied("Skipped", now_text, next_text)
  end
  local job_id = ctx.args[7] .. name .. "@" .. fmt(ctx, tick)
  local a, bad, limits = tick_job(ctx, name, sc, job_id, now)
  local fresh = "1"
  if bad and bad[1] == "DuplicateJob" then
    fresh = "0"
  elseif bad then
    return bad
  else
    enqueue_tick(ctx, a, now, limits)
  end
  advance(ctx, name, tick, nx, job_id)
  record(ctx, "F " .. job_id .. " " .. next_text .. " " .. fresh)
  return applied("Fired", now_text, job_id, next_text, fresh)
end

local function main(ctx)
  local now, name = open_schedule(ctx)
  if now == nil then return name end
  local tick, nx = tick_args(ctx)
  if tick == false then return nx end
  local again = recorded(ctx)
  if again then return replayed(again) end
  local sc = load_schedule(ctx, name)
  if sc == nil then return applied("NotFired", fmt(ctx, now), "missing", "") end
  if tick == nil then return trigger(ctx, name, sc, now) end
  return fire(ctx, name, sc, now, tick, nx)
end

return run_call(KEYS, ARGV, main)
