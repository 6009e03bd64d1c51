-- get (read only): one job, with the dependency it waits on when it is blocked.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] job id
--
-- Replies
--   {"Found", now, job, waiting_on}   waiting_on: the first dependency not yet succeeded
--                                     (for a waiting job), or ""
--   {"MissingJob", id} | {"CorruptJob", id, reason} | {"InvalidJob", reason}

local function waiting_on(h)
  if h.st ~= "W" or not blocked(h) then return "" end
  for _, dep in ipairs(split(h.dp or "")) do
    local d = load_job(dep)
    if d == nil or d.st ~= "S" then return dep end
  end
  return ""
end

local function main()
  local now, e = clock(ARGS[2])
  if now == nil then return e end
  local h, err = load_job(ARGS[3])
  if h == nil then return err end
  return applied("Found", fmt(now), job_reply(ARGS[3], h), waiting_on(h))
end

return run_call(KEYS, ARGV, main)
