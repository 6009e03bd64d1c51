-- cancel: any live state (Waiting, RetryWaiting, Leased) -> Cancelled(reason, now). A leased
-- job's worker is then refused (StaleLease) at its next heartbeat or completion. Dependents of
-- the cancelled job can never run and are cancelled too, naming the dependency: in this call up
-- to CASCADE.step of them, the rest left as cascade work (see "Cascades" in include/cascades.lua).
-- Checks, in order (docs/lifecycle.md, cancel): InvalidJob for a malformed id; MissingJob; InvalidJob for a fence given that is
-- no integer, FenceChanged; TerminalJob; our limit on the reason; the queue's keys (CorruptKey);
-- every dependent this call's part of the cascade reaches (CorruptJob).
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] job id
-- ARGV[4]  expected fence ("" = whatever it is now)   ARGV[5] reason
--
-- Replies
--   {"JobApplied", now, job, {cascaded ids...}}   (in {"More", ...} when work is left: the
--                                     client then carries it on, resume_cascades.lua)
--   {"MissingJob", id} | {"FenceChanged"} | {"TerminalJob"} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

-- uses: core, checks, job, call, cascades, outcomes, callbacks
local applied, fmt, refuse, split = Core.applied, Core.fmt, Core.refuse, Core.split
local TERMINAL = Core.TERMINAL
local check_queue, text_error = Checks.check_queue, Checks.text_error
local job_reply, move = Job.job_reply, Job.move
local record, run_call = Call.record, Call.run_call
local apply_cascade, plan_cascade = Cascades.apply_cascade, Cascades.plan_cascade
local open_fenced = Outcomes.open_fenced
local fire_due = Callbacks.fire_due

local function cancel_main(ctx)
  local reason = ctx.args[5]
  local c, err = open_fenced(ctx, true)
  if c == nil then return err end
  if c.record then
    local cascaded = split(c.record)
    table.remove(cascaded, 1)
    return applied("JobApplied", "", job_reply(ctx, c.id, c.h), cascaded)
  end
  if TERMINAL[c.h.st] then return refuse("TerminalJob") end
  local bad = text_error(reason, "reason") or check_queue(ctx, c.h.q)
  if bad then return bad end
  local plan
  plan, err = plan_cascade(ctx, "c", c.id, c.h)
  if plan == nil then return err end
  move(ctx, c.id, c.h, c.now, {st = "C", cr = reason, fin = fmt(ctx, c.now)})
  apply_cascade(ctx, plan, c.now)
  local ids = ctx.cascade and ctx.cascade.cancelled or {}
  record(ctx, "A " .. table.concat(ids, " "))
  return applied("JobApplied", fmt(ctx, c.now), job_reply(ctx, c.id, c.h), ids)
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, cancel_main(ctx)) end

return run_call(KEYS, ARGV, main)
