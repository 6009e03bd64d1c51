-- change: Waiting / RetryWaiting -> the same job changed: a new input (a higher input revision:
-- Waiting again, attempts afresh, see include/revise.lua), its priority, its time (available_at,
-- a delay from now) or promoted (due now). Several at once are one change.
-- Checks, in order (docs/lifecycle.md, change): InvalidJob for a malformed id; MissingJob;
-- InvalidJob for a fence given that is no integer, FenceChanged; TerminalJob;
-- LeaseHeld(expires_at) for a Leased job (expired or not: recover it first); InvalidJob for
-- nothing to change, a revision without a payload, a payload over the limit, more than one of
-- available_at / delay / promote, or a value out of range; StaleRevision(id, stored) for a
-- revision not above the stored one; the queue's keys (CorruptKey).
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] job id
-- ARGV[4]  expected fence ("" = whatever it is now)   ARGV[5] max payload bytes
-- ARGV[6]  "1" when a new payload is given   ARGV[7] the payload
-- ARGV[8]  input_revision ("" = the stored one + 1; a payload only)
-- ARGV[9]  priority ("" = kept)   ARGV[10] available_at ("" = kept)
-- ARGV[11] delay from now ("" = none)   ARGV[12] "1" to promote: due now (a later time only)
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"FenceChanged"} | {"TerminalJob"} | {"LeaseHeld", expires_at} |
--   {"InvalidJob", reason} | {"StaleRevision", id, stored revision} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again, with the job as it is now.

-- uses: core, checks, call, outcomes, revise
local fmt, invalid, num, PRIORITY_MAX = Core.fmt, Core.invalid, Core.num, Core.PRIORITY_MAX
local PRIORITY_MIN, refuse, TERMINAL = Core.PRIORITY_MIN, Core.refuse, Core.TERMINAL
local check_queue, int_arg, time_error = Checks.check_queue, Checks.int_arg, Checks.time_error
local record, run_call = Call.record, Call.run_call
local job_applied, open_fenced = Outcomes.job_applied, Outcomes.open_fenced
local revision_changes, rewrite = Revise.revision_changes, Revise.rewrite

-- The new input's changes, or nil and a refusal; none (an empty table) without a payload.
local function input_changes(ctx, c)
  local args = ctx.args
  if args[6] ~= "1" then
    if args[8] ~= "" then return nil, invalid("input_revision needs a payload") end
    return {}
  end
  local max = tonumber(args[5]) or 0
  if #args[7] > max then
    return nil, invalid("payload is " .. #args[7] .. " bytes, over the limit of " .. max)
  end
  local rv = num(c.h.rv) + 1
  if args[8] ~= "" then
    local e
    rv, e = int_arg(args[8], "input_revision")
    if rv == nil then return nil, e end
    if rv < 0 then return nil, invalid("input_revision must be nonnegative") end
    if rv <= num(c.h.rv) then return nil, refuse("StaleRevision", c.id, c.h.rv) end
  end
  return revision_changes(ctx, c.h, c.now, {p = args[7], rv = fmt(ctx, rv)})
end

-- The new available_at (a number), or nil (kept), or false and a refusal.
local function new_time(ctx, c)
  local at_arg, delay_arg, promote = ctx.args[10], ctx.args[11], ctx.args[12] == "1"
  if not promote and ctx.args[12] ~= "" then
    return false, invalid("promote must be true or false")
  end
  local given = (at_arg ~= "" and 1 or 0) + (delay_arg ~= "" and 1 or 0) + (promote and 1 or 0)
  if given > 1 then return false, invalid("give one of available_at, delay and promote") end
  if promote then return math.min(num(c.h.at), c.now) end
  if given == 0 then return nil end
  local at, e
  if at_arg ~= "" then
    at, e = int_arg(at_arg, "available_at")
    if at == nil then return false, e end
    if at < 0 then return false, invalid("available_at must be nonnegative") end
  else
    local delay
    delay, e = int_arg(delay_arg, "delay")
    if delay == nil then return false, e end
    if delay < 0 then return false, invalid("delay must be nonnegative") end
    at = c.now + delay
  end
  local bad = time_error(at, "available_at")
  if bad then return false, bad end
  return at
end

-- Every change asked for, as one changes table, or nil and a refusal.
local function all_changes(ctx, c)
  local args = ctx.args
  if args[6] ~= "1" and args[8] == "" and args[9] == "" and args[10] == "" and args[11] == ""
      and args[12] == "" then
    return nil, invalid("nothing to change")
  end
  local at, e1 = new_time(ctx, c)
  if at == false then return nil, e1 end
  local pr
  if args[9] ~= "" then
    local e2
    pr, e2 = int_arg(args[9], "priority")
    if pr == nil then return nil, e2 end
    if pr < PRIORITY_MIN or pr > PRIORITY_MAX then
      return nil, invalid("priority must be between " .. PRIORITY_MIN .. " and " .. PRIORITY_MAX)
    end
  end
  local changes, e3 = input_changes(ctx, c)
  if changes == nil then return nil, e3 end
  if pr ~= nil then changes.pr = fmt(ctx, pr) end
  if at ~= nil then changes.at = fmt(ctx, at) end
  return changes
end

local function main(ctx)
  local c, err = open_fenced(ctx, true)
  if c == nil then return err end
  if c.record then return job_applied(ctx, c, "") end
  if TERMINAL[c.h.st] then return refuse("TerminalJob") end
  if c.h.st == "L" then return refuse("LeaseHeld", c.h.x) end
  local changes
  changes, err = all_changes(ctx, c)
  if changes == nil then return err end
  local bad = check_queue(ctx, c.h.q)
  if bad then return bad end
  rewrite(ctx, c.id, c.h, c.now, changes)
  record(ctx, "A")
  return job_applied(ctx, c, fmt(ctx, c.now))
end

return run_call(KEYS, ARGV, main)
