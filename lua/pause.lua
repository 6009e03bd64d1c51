-- pause: from now on the queue leases nothing: every claim of it (claim.lua by queue,
-- claim_job.lua by id, report_and_claim.lua's claim) is refused QueuePaused until resume.lua; a
-- claim of many applied before this call keeps its jobs. Enqueue, counts, lists, heartbeats,
-- outcomes, sweep, promote, cancel, retry and prune go on as before; enqueue pushes no wake-up
-- token for a paused queue (finish in include/call.lua). A queue nothing was enqueued to yet can
-- be paused (ahead of a deploy): the namespace's queue set takes its name, so that it is listed
-- (queues.lua), paused with no job. Idempotent. A pause that changes the queue writes an event of
-- no job (fields `ev` "paused" and `q`) to the stream, when it is given.
-- Checks, in order: InvalidJob (the queue's name); the types of the namespace's queue and paused
-- sets and of the stream (CorruptKey).
--
-- KEYS[1]  namespace prefix   KEYS[2] optional: the event stream
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] queue
--
-- Replies
--   {"Paused", now, changed}   changed: "1" when the queue was not paused before, else "0"
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets the first delivery's answer again ("Paused", "", changed).

-- uses: core, checks, events, call
local applied, clock, fmt = Core.applied, Core.clock, Core.fmt
local key_paused, key_queues = Core.key_paused, Core.key_queues
local check_types, name_error = Checks.check_types, Checks.name_error
local EVENTS_MAX = Events.EVENTS_MAX
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call

-- The opening of pause / resume: now and the queue, or nil and a refusal.
local function open_pause(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return nil, e end
  local queue = args[3]
  local bad = name_error(queue, "queue")
    or check_types(ctx, {key_queues(ctx), key_paused(ctx)}, "set")
    or (ctx.events and check_types(ctx, {ctx.events}, "stream")) or nil
  if bad then return nil, bad end
  return now, queue
end

local function main(ctx)
  local now, queue = open_pause(ctx)
  if now == nil then return queue end
  local again = recorded(ctx)
  if again then return applied("Paused", "", again) end
  redis.call("SADD", key_queues(ctx), queue)
  local changed = redis.call("SADD", key_paused(ctx), queue)
  if changed == 1 and ctx.events then
    redis.call("XADD", ctx.events, "MAXLEN", "~", EVENTS_MAX, "*", "ev", "paused", "q", queue)
  end
  changed = fmt(ctx, changed)
  record(ctx, changed)
  return applied("Paused", fmt(ctx, now), changed)
end

return run_call(KEYS, ARGV, main)
