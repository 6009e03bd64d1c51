-- dependencies (read only): a job's dependencies, each as it is now (its status, result and last
-- error are fields of its hash), in the order the job lists them; and a page of its dependents
-- (its dependents set): at most `limit` of them, the first by id, each with its status, and how
-- many there are. The page reads at most DEPENDENTS.read members of the set: of a larger set, a
-- random DEPENDENTS.read of them are sorted (the page is then the first of those, not of all).
-- An id no job may have (id_error) is refused InvalidJob.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] job id
-- ARGV[4]  limit: dependents listed (0..DEPENDENTS.limit)
--
-- Replies
--   {"Dependencies", now, {dependency...}, total, {id, status, id, status, ...}}
--     dependency: the job as get_job replies it ({id, field, value, ...}), or {id} alone for a
--     dependency that is gone (pruned); total: the dependents set's size; status: its status
--     at now (status_at: docs/lifecycle.md), "missing" for a dependent gone, "damaged" for one
--     whose state cannot be read
--   {"MissingJob", id} | {"CorruptJob", id, reason} | {"InvalidJob", reason} |
--   {"CorruptKey", key, reason}

-- uses: core, checks, job, call
local applied, clock, fmt, int = Core.applied, Core.clock, Core.fmt, Core.int
local invalid, key_dependents, key_job = Core.invalid, Core.key_dependents, Core.key_job
local split = Core.split
local check_types, id_error = Checks.check_types, Checks.id_error
local job_reply, load_job, status_at = Job.job_reply, Job.load_job, Job.status_at
local run_call = Call.run_call

-- limit: dependents a page lists at most; read: members of the set read for one page at most.
local DEPENDENTS = {limit = 100, read = 1000}
local STATES = {W = true, R = true, L = true, S = true, F = true, C = true, E = true}

-- A dependent's status from three fields (HMGET: st, pd, at), without loading it whole.
local function dependent_status(ctx, id, now)
  local f = redis.call("HMGET", key_job(ctx, id), "st", "pd", "at")
  if not f[1] then return "missing" end
  local timed = f[1] == "W" or f[1] == "R"
  if not STATES[f[1]] or (timed and not int(f[3] or "")) or int(f[2] or "0") == nil then
    return "damaged"
  end
  return status_at({st = f[1], pd = f[2] or "0", at = f[3]}, now)
end

local function dependents_page(ctx, id, limit, now)
  local k = key_dependents(ctx, id)
  local total = redis.call("SCARD", k)
  if total == 0 or limit == 0 then return total, {} end
  local ids
  if total <= DEPENDENTS.read then
    ids = redis.call("SMEMBERS", k)
  else
    ids = redis.call("SRANDMEMBER", k, fmt(ctx, DEPENDENTS.read))
  end
  table.sort(ids)
  local page = {}
  for i = 1, math.min(limit, #ids) do
    page[#page + 1] = ids[i]
    page[#page + 1] = dependent_status(ctx, ids[i], now)
  end
  return total, page
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local bad = id_error(args[3], "job_id")
  if bad then return bad end
  local limit = int(args[4] or "")
  if limit == nil or limit < 0 or limit > DEPENDENTS.limit then
    return invalid("limit must be between 0 and " .. DEPENDENTS.limit)
  end
  local id = args[3]
  local h, err = load_job(ctx, id)
  if h == nil then return err end
  bad = check_types(ctx, {key_dependents(ctx, id)}, "set")
  if bad then return bad end
  local deps = {}
  for _, dep in ipairs(split(h.dp or "")) do
    local d, derr = load_job(ctx, dep)
    if d then
      deps[#deps + 1] = job_reply(ctx, dep, d)
    elseif derr[1] == "MissingJob" then
      deps[#deps + 1] = {dep}
    else
      return derr
    end
  end
  local total, page = dependents_page(ctx, id, limit, now)
  return applied("Dependencies", fmt(ctx, now), deps, fmt(ctx, total), page)
end

return run_call(KEYS, ARGV, main)
