-- resume: a paused queue (pause.lua) leases again; its idle workers are woken at once: one
-- wake-up token per claimable job (ready, or delayed and due), at most WAKE_MAX. Idempotent: a
-- queue not paused (even one the namespace never had) is left as it is. A resume that changes
-- the queue writes an event of no job (`ev` "resumed", `q`), as pause does.
-- Checks, in order: those of pause.lua (InvalidJob, CorruptKey), then the types of the keys it
-- reads and writes (ready, delayed, wake).
--
-- KEYS[1]  namespace prefix   KEYS[2] optional: the event stream
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] queue
--
-- Replies
--   {"Resumed", now, changed}   changed: "1" when the queue was paused, else "0"
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets the first delivery's answer again ("Resumed", "", changed).

-- uses: core, checks, events, call, pause
local applied, fmt, key_paused, key_q = Core.applied, Core.fmt, Core.key_paused, Core.key_q
local writes_error = Checks.writes_error
local wake, WAKE_MAX, EVENTS_MAX = Events.wake, Events.WAKE_MAX, Events.EVENTS_MAX
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local open_pause = Pause.open_pause

local RESUME_WRITES = {"ready", "delayed", wake = true}

local function main(ctx)
  local now, queue = open_pause(ctx)
  if now == nil then return queue end
  local again = recorded(ctx)
  if again then return applied("Resumed", "", again) end
  local bad = writes_error(ctx, queue, RESUME_WRITES)
  if bad then return bad end
  local changed = redis.call("SREM", key_paused(ctx), queue)
  if changed == 1 then
    local due = redis.call("ZCARD", key_q(ctx, queue, "ready"))
      + redis.call("ZCOUNT", key_q(ctx, queue, "delayed"), "-inf", fmt(ctx, now))
    for _ = 1, math.min(due, WAKE_MAX) do wake(ctx, queue) end
    if ctx.events then
      redis.call("XADD", ctx.events, "MAXLEN", "~", EVENTS_MAX, "*", "ev", "resumed", "q", queue)
    end
  end
  record(ctx, fmt(ctx, changed))
  return applied("Resumed", fmt(ctx, now), fmt(ctx, changed))
end

return run_call(KEYS, ARGV, main)
