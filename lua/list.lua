-- list (read only): a page of a queue's jobs in one status, oldest first (by available_at for
-- Available / Scheduled / Retryable, by lease expiry for Executing, by finish time otherwise).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] queue
-- ARGV[4]  status: available | scheduled | retryable | executing | completed | discarded |
--          cancelled | blocked   ARGV[5] offset (>= 0)   ARGV[6] limit (1..1000)
--
-- Replies
--   {"Jobs", now, job...}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A job whose hash is missing or damaged is left out of the page.

local SOURCES = {
  available = {"waiting", "-inf", "now"}, scheduled = {"waiting", "(now", "+inf"},
  retryable = {"retrying"}, executing = {"leased"}, completed = {"succeeded"},
  discarded = {"failed"}, cancelled = {"cancelled"}, blocked = {"blocked"},
}

local function page(queue, src, now, offset, limit)
  local key = key_q(queue, src[1])
  if src[2] == nil then return redis.call("ZRANGE", key, offset, offset + limit - 1) end
  local lo = src[2] == "(now" and "(" .. fmt(now) or src[2]
  local hi = src[3] == "now" and fmt(now) or src[3]
  return redis.call("ZRANGEBYSCORE", key, lo, hi, "LIMIT", offset, limit)
end

local function main()
  local now, e = clock(ARGV[2])
  if now == nil then return e end
  local queue, status = ARGV[3], ARGV[4]
  local bad = name_error(queue, "queue") or check_queue(queue)
  if bad then return bad end
  local src = SOURCES[status]
  if src == nil then return invalid("unknown status '" .. status .. "'") end
  local offset, limit = int(ARGV[5]), int(ARGV[6])
  if offset == nil or offset < 0 then return invalid("offset must be a nonnegative integer") end
  if limit == nil or limit < 1 or limit > 1000 then
    return invalid("limit must be between 1 and 1000")
  end
  local out = {"Jobs", fmt(now)}
  for _, id in ipairs(page(queue, src, now, offset, limit)) do
    local h = load_job(id)
    if h then out[#out + 1] = job_reply(id, h) end
  end
  return out
end

return finish(main())
