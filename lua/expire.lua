-- expire: Leased (lease run out) -> RetryWaiting("worker lease expired", now) while attempts
-- remain, else Failed. Recovery of a dead worker's job, one job, with the fence the caller saw.
-- Checks, in order (docs/lifecycle.md, expire): InvalidJob for a malformed id; MissingJob;
-- InvalidJob for a fence that is no integer, FenceChanged; then by state: StaleLease for a waiting
-- job, TerminalJob for a finished one; the queue's keys (CorruptKey); LeaseHeld(expires_at) for a
-- lease not yet run out; the job's failure history key (CorruptKey). Applied: the attempt is kept
-- in the job's failure history (kind LeaseExpired, no traceback).
-- The write is expire_job below; sweep_expired.lua (every queue) and claim.lua (its queue) apply it too.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] job id   ARGV[4] observed fence
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"FenceChanged"} | {"LeaseHeld", expires_at} | {"StaleLease"} |
--   {"TerminalJob"} | {"InvalidJob", reason} | {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

-- uses: core, checks, call, cascades, outcomes, callbacks
local fmt, key_errors, refuse, TERMINAL = Core.fmt, Core.key_errors, Core.refuse, Core.TERMINAL
local check_queue, check_types = Checks.check_queue, Checks.check_types
local record, run_call = Call.record, Call.run_call
local move_or_fail = Cascades.move_or_fail
local job_applied, keep_error = Outcomes.job_applied, Outcomes.keep_error
local open_fenced, retry_or_fail = Outcomes.open_fenced, Outcomes.retry_or_fail
local fire_due = Callbacks.fire_due

-- A leased job whose lease has run out (the fence as observed) -> RetryWaiting or Failed, as a
-- failed attempt would go. Returns the refusal or nil; on success the job has moved.
local function expire_job(ctx, id, h, now)
  if tonumber(h.x) > now then return refuse("LeaseHeld", h.x) end
  local kind, reason = "LeaseExpired", "worker lease expired"
  local bad = check_types(ctx, {key_errors(ctx, id)}, "list")
    or move_or_fail(ctx, id, h, now, retry_or_fail(ctx, h, kind, reason, now, 0))
  if bad then return bad end
  keep_error(ctx, id, h, now, {kind = kind, reason = reason, trace = ""})
  return nil
end

local function expire_main(ctx)
  local c, err = open_fenced(ctx, false)
  if c == nil then return err end
  if c.record then return job_applied(ctx, c, "") end
  if c.h.st == "W" or c.h.st == "R" then return refuse("StaleLease") end
  if TERMINAL[c.h.st] then return refuse("TerminalJob") end
  local bad = check_queue(ctx, c.h.q) or expire_job(ctx, c.id, c.h, c.now)
  if bad then return bad end
  record(ctx, "A")
  return job_applied(ctx, c, fmt(ctx, c.now))
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, expire_main(ctx)) end

return run_call(KEYS, ARGV, main)
