-- complete: Leased -> Succeeded(output_ref, now). Releases every dependent whose dependencies
-- have now all succeeded: in this call up to CASCADE.step of them, the rest left as cascade work
-- (see "Cascades" in include/cascades.lua).
-- With a result retention (result_ttl ms), the job is also indexed in `expiring` at the time it
-- may be deleted: now + the retention, at least the re-send window (CALL_TTL_MS); prune.lua
-- deletes it from then on.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease on any mismatch
-- of worker, job id, input revision, state, fence, nonce or expiry; LeaseExpired(expires_at)
-- when now >= expires_at); InvalidJob for an empty output_ref, then our limit on it, then for a
-- result_ttl that is not a nonnegative integer (or puts the deletion past 2^50).
-- The edge is complete_job below; report_many.lua applies it too, once per Complete item.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] output_ref   ARGV[11] result (msgpack bytes, may be "")
-- ARGV[12] result_ttl ms (optional; "" or absent: kept until prune's age and count limits)
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again, not StaleLease.

-- uses: core, checks, index, job, call, cascades, lease, callbacks
local CALL_TTL_MS, fmt, int, invalid = Core.CALL_TTL_MS, Core.fmt, Core.int, Core.invalid
local key_q, MAXINT = Core.key_q, Core.MAXINT
local text_error, writes_error = Checks.text_error, Checks.writes_error
local zadd = Index.zadd
local move = Job.move
local run_call = Call.run_call
local apply_cascade, plan_cascade = Cascades.apply_cascade, Cascades.plan_cascade
local lease_error, lease_outcome = Lease.lease_error, Lease.lease_outcome
local fire_due = Callbacks.fire_due

-- What a completion writes: 3 TYPE calls (4 with a retention), not one per key of the queue
-- (see writes_error).
local COMPLETION_WRITES = {"leased", "succeeded"}
local RETAINED_WRITES = {"leased", "succeeded", "expiring"}

-- When a job finished at `now` with result_ttl `ttl` ("" or nil: none) may be deleted: false
-- for none, or nil and a refusal.
local function deletion_at(ttl, now)
  if ttl == nil or ttl == "" then return false end
  local ms = int(ttl)
  if ms == nil or ms < 0 or ms > MAXINT - now - CALL_TTL_MS then
    return nil, invalid("result_ttl must be a nonnegative integer (ms), below 2^50 - now")
  end
  return now + math.max(ms, CALL_TTL_MS)
end

-- c: the held job (open_lease). A refusal, or nil once the job has moved.
local function complete_job(ctx, c, output_ref, result, ttl)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  if output_ref == "" then return invalid("output_ref must not be empty") end
  local delete_at
  delete_at, bad = deletion_at(ttl, c.now)
  if delete_at == nil then return bad end
  bad = text_error(output_ref, "output_ref")
    or writes_error(ctx, c.h.q, delete_at and RETAINED_WRITES or COMPLETION_WRITES)
  if bad then return bad end
  local plan, derr = plan_cascade(ctx, "s", c.id, c.h)
  if plan == nil then return derr end
  -- An empty result (None) is not stored: the job reads back with no result either way.
  move(ctx, c.id, c.h, c.now, {st = "S", o = output_ref, res = result ~= "" and result or nil,
    fin = fmt(ctx, c.now)})
  if delete_at then zadd(ctx, key_q(ctx, c.h.q, "expiring"), fmt(ctx, delete_at), c.id) end
  apply_cascade(ctx, plan, c.now)
  return nil
end

local function complete_main(ctx)
  return lease_outcome(ctx, complete_job, ctx.args[10], ctx.args[11], ctx.args[12])
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, complete_main(ctx)) end

return run_call(KEYS, ARGV, main)
