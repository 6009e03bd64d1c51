-- release: Leased -> Waiting(now + delay), handing the job back without using an attempt
-- (attempt - 1). For a worker that shuts down before a job finished, or a task that asks to run
-- later ("snooze"). The fence stays; the next claim raises it as every claim does.
-- Checks, in order: MissingJob; the lease check of docs/lifecycle.md (StaleLease /
-- LeaseExpired(expires_at)); InvalidJob for a delay that is no integer or negative, or a hold
-- that is no positive integer; the keys of the queue's flow, for a hold (CorruptKey).
-- The edge is release_job below; report_many.lua applies it too, once per Release item.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3..8] token: job_id, input_revision, worker_id, fence, expires_at, nonce
-- ARGV[9]  caller's worker id   ARGV[10] delay ms   ARGV[11] hold ms ("" or absent: none): the
--   task was told to slow down, so no job of the job's group (of its queue, for a job without a
--   group) starts for that long (include/flow_control.lua's hold)
--
-- Replies
--   {"JobApplied", now, job}
--   {"MissingJob", id} | {"StaleLease"} | {"LeaseExpired", expires_at} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

-- uses: core, checks, job, call, lease, flow_control
local fmt, num = Core.fmt, Core.num
local check_queue, duration_arg = Checks.check_queue, Checks.duration_arg
local time_error = Checks.time_error
local move = Job.move
local run_call = Call.run_call
local lease_error, lease_outcome = Lease.lease_error, Lease.lease_outcome
local flow_error, hold = FlowControl.flow_error, FlowControl.hold

-- c: the held job (open_lease). A refusal, or nil once the job has moved.
local function release_job(ctx, c, delay_arg, hold_arg)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  local delay, e = duration_arg(delay_arg, "delay", 0)
  if delay == nil then return e end
  bad = time_error(c.now + delay, "now + delay") or check_queue(ctx, c.h.q)
  if bad then return bad end
  local held = nil
  if hold_arg ~= nil and hold_arg ~= "" then
    held, e = duration_arg(hold_arg, "hold", 1)
    if held == nil then return e end
    bad = time_error(c.now + held, "now + hold") or flow_error(ctx, c.h.q, c.h.g)
    if bad then return bad end
  end
  move(ctx, c.id, c.h, c.now,
    {st = "W", at = fmt(ctx, c.now + delay), a = fmt(ctx, num(c.h.a) - 1)})
  if held then hold(ctx, c.h.q, c.h.g, c.now, held) end
  return nil
end

local function main(ctx) return lease_outcome(ctx, release_job, ctx.args[10], ctx.args[11]) end

return run_call(KEYS, ARGV, main)
