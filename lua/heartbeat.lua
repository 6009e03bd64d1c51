-- heartbeat: Leased -> Leased with expires_at = now + lease_duration. Returns the new token; the
-- old one is stale from then on.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease /
-- LeaseExpired(expires_at)); InvalidJob for a lease duration < 1; the lease index's key
-- (CorruptKey).
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] lease duration ms
-- ARGV[11] progress value (optional: absent or "" = none carried)   ARGV[12] progress message
--          (lua/include/progress.lua: written, with the event `progress`, only when it differs
--          from what the job holds; InvalidJob for a value that is not a finite number)
--
-- Replies
--   {"ClaimApplied", now, {"Claim", job, token}}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets the same new token again, with the job as it is now.

-- uses: core, checks, job, call, lease, progress
local applied, fmt, split = Core.applied, Core.fmt, Core.split
local duration_arg, writes_error = Checks.duration_arg, Checks.writes_error
local job_reply, move = Job.job_reply, Job.move
local record, run_call = Call.record, Call.run_call
local lease_error, open_lease = Lease.lease_error, Lease.open_lease
local replayed_claim, token_record = Lease.replayed_claim, Lease.token_record
local token_reply = Lease.token_reply
local progress_changes, progress_error = Progress.progress_changes, Progress.progress_error

-- A heartbeat writes the lease index only (the state does not change: no state event; progress
-- it carries has its own).
local HEARTBEAT_WRITES = {"leased"}

local function main(ctx)
  local c, err = open_lease(ctx)
  if c == nil then return err end
  if c.record then
    return applied("ClaimApplied", "",
      replayed_claim(ctx, c.id, c.h, c.worker, split(c.record)))
  end
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  local lease_ms, e = duration_arg(ctx.args[10], "lease_duration", 1)
  if lease_ms == nil then return e end
  local value, message = ctx.args[11], ctx.args[12] or ""
  if value == "" then value = nil end
  if value then
    bad = progress_error(value, message)
    if bad then return bad end
  end
  bad = writes_error(ctx, c.h.q, HEARTBEAT_WRITES)
  if bad then return bad end
  local changes = value and progress_changes(ctx, c.id, c.h, c.now, value, message) or {}
  changes.x = fmt(ctx, c.now + lease_ms)
  move(ctx, c.id, c.h, c.now, changes)
  record(ctx, token_record(c.h.f, c.h.x, c.h.n, c.h.rv))
  return applied("ClaimApplied", fmt(ctx, c.now),
    {"Claim", job_reply(ctx, c.id, c.h), token_reply(c.id, c.h)})
end

return run_call(KEYS, ARGV, main)
