-- progress.lua: what a running job reports of how far it is (pv value, pm message, pt when
-- written, pa the attempt that reported it), carried by a heartbeat (heartbeat.lua) or sent at
-- once (report_progress.lua). Written only when it differs from what the job holds: a report
-- that changes nothing writes nothing and emits no event. Kept when the job finishes or is
-- retried (pa tells which attempt it belongs to).

-- uses: core, events
local fmt, invalid = Core.fmt, Core.invalid
local EVENTS_MAX = Events.EVENTS_MAX

local PROGRESS_VALUE_MAX = 32 -- bytes of the value's text (Python sends repr(float))
local PROGRESS_MESSAGE_MAX = 800 -- bytes: 200 characters of up to 4 bytes each

-- InvalidJob unless value is a finite number's text and message within its bound.
local function progress_error(value, message)
  local n = tonumber(value)
  if #value > PROGRESS_VALUE_MAX or n == nil or n ~= n or n == math.huge or n == -math.huge then
    return invalid("progress value must be a finite number")
  end
  if #message > PROGRESS_MESSAGE_MAX then
    return invalid("progress message longer than " .. PROGRESS_MESSAGE_MAX .. " bytes")
  end
  return nil
end

-- The fields to write for a report of (value, message) at now, or nil when the job already
-- holds it for this attempt; the event `progress` is emitted when there are some.
local function progress_changes(ctx, id, h, now, value, message)
  if h.pv == value and (h.pm or "") == message and h.pa == h.a then return nil end
  if ctx.events then
    redis.call("XADD", ctx.events, "MAXLEN", "~", fmt(ctx, EVENTS_MAX), "*", "job", id,
      "ev", "progress", "q", h.q, "a", h.a, "pv", value, "pm", message)
  end
  return {pv = value, pm = message, pt = fmt(ctx, now), pa = h.a}
end
