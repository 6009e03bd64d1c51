-- list (read only): a page of a queue's jobs in one status (each job is in exactly one).
-- Order: Available: the claimable ones in claim order, then those due but not yet promoted (by
-- available_at); Scheduled by available_at; Blocked by available_at; Retryable by available_at;
-- Executing by lease expiry; Completed / Discarded / Cancelled by finish time.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] queue
-- ARGV[4]  status: available | scheduled | retryable | executing | completed | discarded |
--          cancelled | blocked   ARGV[5] offset (>= 0)   ARGV[6] limit (1..1000)
--
-- Replies
--   {"Jobs", now, job...}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A job whose hash is missing or damaged is left out of the page. Cost: O(log N + offset +
-- limit), plus the retry-waiting jobs skipped over for Available / Scheduled.

local CHUNK_READ = 100
local PLAIN = {retryable = "retrying", executing = "leased", completed = "succeeded",
  discarded = "failed", cancelled = "cancelled", blocked = "blocked"}

local function is_waiting(h) return h.st == "W" end

-- Up to `want` jobs from an index, in its order, that pass `keep`; appended to out.
-- range(start, count) reads the index; member_id turns a member into a job id.
local function collect(ctx, out, want, range, member_id, keep)
  local start = 0
  while #out < want do
    local members = range(start, CHUNK_READ)
    for _, member in ipairs(members) do
      local id = member_id(member)
      local h = load_job(ctx, id)
      if h and keep(h) then
        out[#out + 1] = {id, h}
        if #out >= want then break end
      end
    end
    if #members < CHUNK_READ then break end
    start = start + CHUNK_READ
  end
  return out
end

local function by_score(key, lo, hi)
  return function(start, count)
    return redis.call("ZRANGEBYSCORE", key, lo, hi, "LIMIT", start, count)
  end
end

local function by_rank(key)
  return function(start, count) return redis.call("ZRANGE", key, start, start + count - 1) end
end

local function same(member) return member end

local function available(ctx, queue, now, want)
  local out, due = {}, fmt(ctx, now)
  collect(ctx, out, want, by_rank(key_q(ctx, queue, "ready")), ready_id, is_waiting)
  collect(ctx, out, want, by_score(key_q(ctx, queue, "delayed"), "-inf", due), same, is_waiting)
  return out
end

local function scheduled(ctx, queue, now, want)
  local out, later = {}, "(" .. fmt(ctx, now)
  collect(ctx, out, want, by_score(key_q(ctx, queue, "delayed"), later, "+inf"), same, is_waiting)
  return out
end

local function page(ctx, queue, status, now, offset, limit)
  local plain = PLAIN[status]
  if plain then
    local out = {}
    local keep = function() return true end
    local range = function(start, count)
      local k = key_q(ctx, queue, plain)
      return redis.call("ZRANGE", k, offset + start, offset + start + count - 1)
    end
    collect(ctx, out, limit, range, same, keep)
    return out, 0
  end
  local pick = status == "available" and available or scheduled
  return pick(ctx, queue, now, offset + limit), offset
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local queue, status = args[3], args[4]
  local bad = name_error(queue, "queue") or check_queue(ctx, queue)
  if bad then return bad end
  if PLAIN[status] == nil and status ~= "available" and status ~= "scheduled" then
    return invalid("unknown status '" .. status .. "'")
  end
  local offset, limit = int(args[5]), int(args[6])
  if offset == nil or offset < 0 then return invalid("offset must be a nonnegative integer") end
  if limit == nil or limit < 1 or limit > 1000 then
    return invalid("limit must be between 1 and 1000")
  end
  local out = {"Jobs", fmt(ctx, now)}
  local items, skip = page(ctx, queue, status, now, offset, limit)
  for i = skip + 1, #items do out[#out + 1] = job_reply(ctx, items[i][1], items[i][2]) end
  return out
end

return run_call(KEYS, ARGV, main)
