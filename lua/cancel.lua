-- cancel: any live state (Waiting, RetryWaiting, Leased) -> Cancelled(reason, now). A leased
-- job's worker is then refused (StaleLease) at its next heartbeat or completion. Dependents of
-- the cancelled job can never run and are cancelled in the same script, naming the dependency.
-- Checks, the seed's cancel_transition in order: FenceChanged; TerminalJob.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] job id
-- ARGV[4]  expected fence ("" = whatever it is now)   ARGV[5] reason
--
-- Replies
--   {"JobApplied", now, job, {cascaded ids...}}
--   {"MissingJob", id} | {"FenceChanged"} | {"TerminalJob"} | {"InvalidJob", reason} |
--   {"CorruptJob", id, reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets JobApplied again.

local function main()
  local c, err = open_fenced(true)
  if c == nil then return err end
  if c.record then
    local cascaded = split(c.record)
    table.remove(cascaded, 1)
    return applied("JobApplied", "", job_reply(c.id, c.h), cascaded)
  end
  if TERMINAL[c.h.st] then return refuse("TerminalJob") end
  local bad = text_error(ARGS[5], "reason") or check_queue(c.h.q)
  if bad then return bad end
  local closure
  closure, err = cancel_closure(c.id, c.h, false)
  if closure == nil then return err end
  move(c.id, c.h, c.now, {st = "C", cr = ARGS[5], fin = fmt(c.now)})
  forget_dependents(c.id, c.h)
  apply_cancel_closure(closure, c.now)
  local ids = {}
  for i, item in ipairs(closure) do ids[i] = item[1] end
  record(c.cid, "A " .. table.concat(ids, " "))
  return applied("JobApplied", fmt(c.now), job_reply(c.id, c.h), ids)
end

return run_call(KEYS, ARGV, main)
