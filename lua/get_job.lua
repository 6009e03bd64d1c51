-- get_job (read only): one job, with the dependency it waits on when it is blocked, and its failure
-- history (keep_error in include/outcomes.lua). An id no job may have (id_error) is refused InvalidJob.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] job id
--
-- Replies
--   {"Found", now, job, waiting_on, errors}   waiting_on: the first dependency not yet
--                                     succeeded (for a blocked job; under "run": not yet
--                                     ended), else one that succeeded or ended
--                                     whose cascade has not reached the job yet, or ""; errors:
--                                     the last failed attempts, newest first, as the history
--                                     keeps them (none when its key holds another type)
--   {"MissingJob", id} | {"CorruptJob", id, reason} | {"InvalidJob", reason}

-- uses: core, checks, job, call
local applied, clock, fmt, key_errors = Core.applied, Core.clock, Core.fmt, Core.key_errors
local NONE, pcall_typed, split, TERMINAL = Core.NONE, Core.pcall_typed, Core.split, Core.TERMINAL
local id_error = Checks.id_error
local blocked, job_reply, load_job = Job.blocked, Job.job_reply, Job.load_job
local run_call = Call.run_call

-- The first dependency not succeeded (under "run": not ended); else the first one whose cascade
-- has not reached this job yet (its `cw`: the job is released when it does).
local function waiting_on(ctx, h)
  if h.st ~= "W" or not blocked(h) then return "" end
  local releasing, run = "", h.odf == "run"
  for _, dep in ipairs(split(h.dp or "")) do
    local d = load_job(ctx, dep)
    if d == nil or (d.st ~= "S" and not (run and TERMINAL[d.st])) then return dep end
    if releasing == "" and d.cw then releasing = dep end
  end
  return releasing
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local bad = id_error(args[3], "job_id")
  if bad then return bad end
  local h, err = load_job(ctx, args[3])
  if h == nil then return err end
  local errors = NONE
  if h.ek then -- (only a job that failed an attempt, or was retried, has a history)
    errors = pcall_typed("LRANGE", key_errors(ctx, args[3]), "0", "-1") -- (5 at most)
    if errors.err then errors = NONE end
  end
  return applied("Found", fmt(ctx, now), job_reply(ctx, args[3], h), waiting_on(ctx, h), errors)
end

return run_call(KEYS, ARGV, main)
