-- get (read only): one job, with the dependency it waits on when it is blocked, and its failure
-- history (keep_error in _lib.lua).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] job id
--
-- Replies
--   {"Found", now, job, waiting_on, errors}   waiting_on: the first dependency not yet
--                                     succeeded (for a waiting job), or ""; errors: the last
--                                     failed attempts, newest first, as the history keeps them
--                                     (none when its key holds another type)
--   {"MissingJob", id} | {"CorruptJob", id, reason} | {"InvalidJob", reason}

local function waiting_on(ctx, h)
  if h.st ~= "W" or not blocked(h) then return "" end
  for _, dep in ipairs(split(h.dp or "")) do
    local d = load_job(ctx, dep)
    if d == nil or d.st ~= "S" then return dep end
  end
  return ""
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local h, err = load_job(ctx, args[3])
  if h == nil then return err end
  local errors = NONE
  if h.ek then -- (only a job that failed an attempt, or was retried, has a history)
    errors = redis.pcall("LRANGE", key_errors(ctx, args[3]), "0", "-1") -- (5 at most)
    if errors.err then errors = NONE end
  end
  return applied("Found", fmt(ctx, now), job_reply(ctx, args[3], h), waiting_on(ctx, h), errors)
end

return run_call(KEYS, ARGV, main)
