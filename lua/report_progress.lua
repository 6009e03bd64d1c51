-- report_progress: a running job's progress, sent at once (a heartbeat carries it otherwise):
-- Leased -> Leased, the job's progress fields written (lua/include/progress.lua) and the event
-- `progress` emitted, only when they differ from what the job holds. The lease is not renewed.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease /
-- LeaseExpired(expires_at)), except that the token's expires_at may be older than the job's (a
-- heartbeat may have renewed the lease since the token was read: the fence and the nonce tell
-- the lease); InvalidJob for a value that is not a finite number or a message too long.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] progress value (a finite number as text)
-- ARGV[11] progress message (may be "")
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason}
-- A re-sent call (same call id) gets "JobApplied" with the job as it is now, writing nothing.

-- uses: core, call, lease, outcomes, progress
local fmt, key_job = Core.fmt, Core.key_job
local record, run_call = Call.record, Call.run_call
local lease_error, open_lease = Lease.lease_error, Lease.open_lease
local job_applied = Outcomes.job_applied
local progress_changes, progress_error = Progress.progress_changes, Progress.progress_error

local function main(ctx)
  local c, err = open_lease(ctx)
  if c == nil then return err end
  if c.record then return job_applied(ctx, c, "") end
  local t = c.t
  local bad = lease_error(c.id, c.h, {t[1], t[2], t[3], t[4], c.h.x, t[6]}, c.worker, c.now)
  if bad then return bad end
  bad = progress_error(ctx.args[10] or "", ctx.args[11] or "")
  if bad then return bad end
  local changes = progress_changes(ctx, c.id, c.h, c.now, ctx.args[10], ctx.args[11] or "")
  if changes then
    redis.call("HSET", key_job(ctx, c.id), "pv", changes.pv, "pm", changes.pm, "pt", changes.pt,
      "pa", changes.pa)
    for f, v in pairs(changes) do c.h[f] = v end
    ctx.changed[c.id] = {changes}
  end
  record(ctx, "A")
  return job_applied(ctx, c, fmt(ctx, c.now))
end

return run_call(KEYS, ARGV, main)
