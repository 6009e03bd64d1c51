-- events.lua: the event stream and the wake lists idle workers block on.

-- uses: core
local fmt, NONE = Core.fmt, Core.NONE

-- The stream keeps about EVENTS_MAX job changes: an entry lists a run of them (up to a whole
-- batch), so each XADD trims to EVENTS_MAX / (the changes in its own entry) entries, at least 1.
local EVENTS_MAX = 10000
-- WAKE_MAX: the wake-up tokens a call pushes at most per queue. A list nobody takes from is
-- trimmed back to its last WAKE_MAX once it holds more than twice that: one LTRIM every
-- WAKE_MAX + 1 pushes rather than one a push, and idle workers wake no more than 2 * WAKE_MAX
-- times for jobs already taken.
local WAKE_MAX = 16

-- Events are grouped: consecutive events of one kind and queue in one call become one stream
-- entry whose `job` and `a` fields list the jobs and their attempts, space-separated (ids hold
-- no whitespace), in order. One XADD per run (ctx.event_runs, made at the first) rather than
-- per job; a job's events keep their order.
local function emit(ctx, id, h, ev)
  if ctx.events then
    local runs = ctx.event_runs
    if runs == nil then
      runs = {}
      ctx.event_runs = runs
    end
    local last = runs[#runs]
    if last == nil or last.ev ~= ev or last.q ~= h.q or last.pm then
      last = {ev = ev, q = h.q, jobs = {}, attempts = {}}
      runs[#runs + 1] = last
    end
    last.jobs[#last.jobs + 1] = id
    last.attempts[#last.attempts + 1] = h.a
  end
end

-- Why the job of the event emitted last happened to enter it (an operator retry's reason): its
-- entry carries it as `pm`, as a progress event carries its message, and names no other job.
local function note(ctx, why)
  local runs = ctx.event_runs
  if runs and runs[#runs] then runs[#runs].pm = why end
end

-- Once a call (the runs are dropped).
local function flush_events(ctx)
  local runs = ctx.event_runs
  ctx.event_runs = nil
  for _, run in ipairs(runs or NONE) do
    local entries = fmt(ctx, math.max(1, math.floor(EVENTS_MAX / #run.jobs)))
    if run.pm then
      redis.call("XADD", ctx.events, "MAXLEN", "~", entries, "*", "job", run.jobs[1], "ev", run.ev,
        "q", run.q, "a", run.attempts[1], "pm", run.pm)
    else
      redis.call("XADD", ctx.events, "MAXLEN", "~", entries, "*", "job",
        table.concat(run.jobs, " "), "ev", run.ev, "q", run.q, "a", table.concat(run.attempts, " "))
    end
  end
end

-- Queues that got claimable jobs during this call, and how many (ctx.woken, made at the first):
-- idle workers block on the queue's wake list; finish() pushes at most WAKE_MAX tokens per queue
-- once the call is done.
local function wake(ctx, queue)
  local woken = ctx.woken
  if woken == nil then
    ctx.woken = {[queue] = 1}
  else
    woken[queue] = (woken[queue] or 0) + 1
  end
end

