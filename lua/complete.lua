-- complete: Leased -> Succeeded(output_ref, now). Releases, in the same script, every dependent
-- whose dependencies have now all succeeded.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease on any mismatch
-- of worker, job id, input revision, state, fence, nonce or expiry; LeaseExpired(expires_at)
-- when now >= expires_at); InvalidJob for an empty output_ref, then our limit on it.
-- The edge is complete_job below; report.lua applies it too, once per Complete item.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] output_ref   ARGV[11] result (msgpack bytes, may be "")
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again, not StaleLease.

-- What a completion writes: 3 TYPE calls, not the queue's 12 (see writes_error).
local COMPLETION_WRITES = {"leased", "succeeded"}

-- c: the held job (open_lease). A refusal, or nil once the job has moved.
local function complete_job(ctx, c, output_ref, result)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  if output_ref == "" then return invalid("output_ref must not be empty") end
  bad = text_error(output_ref, "output_ref") or writes_error(ctx, c.h.q, COMPLETION_WRITES)
  if bad then return bad end
  local dependents, derr = load_dependents(ctx, c.id, c.h)
  if dependents == nil then return derr end
  -- An empty result (None) is not stored: the job reads back with no result either way.
  move(ctx, c.id, c.h, c.now, {st = "S", o = output_ref, res = result ~= "" and result or nil,
    fin = fmt(ctx, c.now)})
  release_dependents(ctx, dependents, c.now)
  return nil
end

local function main(ctx)
  return lease_outcome(ctx, complete_job, ctx.args[10], ctx.args[11])
end

return run_call(KEYS, ARGV, main)
