-- list_jobs (read only): a page of a queue's jobs in one status (each job is in exactly one).
-- Statuses are counts.lua's: Available holds the waiting and retry-waiting jobs whose time has
-- come, Retryable the retry-waiting ones whose time has not.
-- Order: Available: the claimable ones in claim order, then those due but not yet promoted (by
-- available_at); Scheduled by available_at; Blocked by available_at; Retryable by available_at;
-- Executing by lease expiry; Completed / Discarded / Cancelled / Expired by finish time.
-- Two ways to page: by offset (available / scheduled: at most OFFSET_MAX jobs in) or by cursor (ARGV[7] given: "" for
-- the first page, then the cursor the last page returned), which resumes after the last index
-- entry read, wherever that is now, at O(log N) whatever the depth.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id (unused)   ARGV[2] now ("" = server clock)   ARGV[3] queue
-- ARGV[4]  status: available | scheduled | retryable | executing | completed | discarded |
--          cancelled | blocked | expired   ARGV[5] offset (>= 0; available and scheduled: at most OFFSET_MAX)   ARGV[6] limit (1..1000)
-- ARGV[7]  cursor (optional: absent for a page by offset)
--
-- Replies
--   {"Jobs", now, first, job...}                   (by offset)
--   {"Page", now, next cursor ("" at the end), job...}  (by cursor)
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- first: how many of the jobs come from the status's first run of index entries (of available,
-- the claimable ones; the rest are its due ones not yet promoted), so that the pages of several
-- partitions merge in this order (quasar_redis/_partitions.py).
-- A job whose hash is missing or damaged is left out of the page. Cost: by offset O(log N +
-- offset + limit), plus the RetryWaiting entries skipped for Scheduled; by cursor
-- O(log² N + limit): a page reads at most limit + SCAN_EXTRA index entries, so it may hold
-- fewer than limit jobs (even none) before the end, which only an empty cursor marks.

-- uses: core, checks, job, call
local clock, fmt, ID_MAX, int, invalid = Core.clock, Core.fmt, Core.ID_MAX, Core.int, Core.invalid
local key_job, key_q = Core.key_job, Core.key_q
local check_queue, name_error = Checks.check_queue, Checks.name_error
local blocked, job_reply, load_job = Job.blocked, Job.job_reply, Job.load_job
local ready_id = Job.ready_id
local run_call = Call.run_call

local CHUNK_READ = 100
local OFFSET_MAX = 1000
local SCAN_EXTRA = 100
local PLAIN = {executing = "leased", completed = "succeeded", discarded = "failed",
  cancelled = "cancelled", blocked = "blocked", expired = "expired"}

local function is_waiting(h) return h.st == "W" end
local function is_unblocked(h) return h.st == "W" or h.st == "R" end
local function keep_all() return true end
local function same(member) return member end

-- The runs of index entries a status pages through, in order: {key, below, upto, member_id,
-- keep}: the entries of key scored above `below` ("" for none) and at most `upto`, whose job
-- passes keep (member_id turns an entry into a job id).
local function segments(ctx, queue, status, now)
  local plain = PLAIN[status]
  if plain then return {{key_q(ctx, queue, plain), "", "+inf", same, keep_all}} end
  local delayed, due = key_q(ctx, queue, "delayed"), fmt(ctx, now)
  if status == "scheduled" then return {{delayed, due, "+inf", same, is_waiting}} end
  if status == "retryable" then
    return {{key_q(ctx, queue, "retrying"), due, "+inf", same, keep_all}}
  end
  return {{key_q(ctx, queue, "ready"), "", "+inf", ready_id, is_unblocked},
    {delayed, "", due, same, is_unblocked}}
end

-- The ranks [first, stop) of a segment's entries.
local function bounds(seg)
  local first = seg[2] == "" and 0 or redis.call("ZCOUNT", seg[1], "-inf", seg[2])
  return first, redis.call("ZCOUNT", seg[1], "-inf", seg[3])
end

-- Whether a sorts after b as Redis compares members: byte by byte (Lua's own comparison follows
-- the server's locale).
local function bytes_after(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end

-- The rank of the first entry of key after (score, member): right after the member while it is
-- still there with that score, else found among the entries of equal score by bisection.
local function rank_after(key, score, member)
  local rank = redis.call("ZRANK", key, member)
  if rank and redis.call("ZSCORE", key, member) == score then return rank + 1 end
  local lo = redis.call("ZCOUNT", key, "-inf", "(" .. score)
  local hi = redis.call("ZCOUNT", key, "-inf", score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if bytes_after(redis.call("ZRANGE", key, mid, mid)[1], member) then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- Cursors: "<status>:<segment>:<score>:<member in hex>", the last entry read.
local function cursor(status, last)
  if last == nil then return "" end
  local hex = string.gsub(last[3], ".", function(c) return string.format("%02x", string.byte(c)) end)
  return status .. ":" .. last[1] .. ":" .. last[2] .. ":" .. hex
end

-- The position {segment, rank} a cursor resumes at, or nil and a refusal.
local function resume(status, segs, text)
  if text == "" then return {1, 0} end
  local name, seg, score, hex = string.match(text, "^([a-z]+):(%d+):(%-?%d+):(%x*)$")
  seg = tonumber(seg)
  if name ~= status or segs[seg] == nil or #hex % 2 == 1 or #hex > 2 * (ID_MAX + 16) then
    return nil, invalid("after must be a cursor a page of this status returned")
  end
  local member = string.gsub(hex, "%x%x", function(x) return string.char(tonumber(x, 16)) end)
  return {seg, rank_after(segs[seg][1], score, member)}
end

-- The jobs from position `from` on: `skip` kept ones left out, then up to `want` ({id, job,
-- segment}), reading at most `budget` entries. Returns them and the last entry read {segment,
-- score, member}, or nil when the segments ran out.
local function scan(ctx, segs, from, skip, want, budget)
  local out, read, last = {}, 0, nil
  for s = from[1], #segs do
    local key, member_id, keep = segs[s][1], segs[s][4], segs[s][5]
    local first, stop = bounds(segs[s])
    local rank = s == from[1] and math.max(from[2], first) or first
    while rank < stop do
      if read >= budget then return out, last end
      local n = math.min(CHUNK_READ, stop - rank, budget - read)
      local entries = redis.call("ZRANGE", key, rank, rank + n - 1, "WITHSCORES")
      for i = 1, #entries, 2 do
        read, rank, last = read + 1, rank + 1, {s, entries[i + 1], entries[i]}
        local id = member_id(entries[i])
        if skip > 0 then -- (a job skipped over: its state is all the offset needs)
          local st = redis.pcall("HGET", key_job(ctx, id), "st")
          if type(st) == "string" and keep({st = st}) then skip = skip - 1 end
        else
          local h = load_job(ctx, id)
          if h and keep(h) then out[#out + 1] = {id, h, s} end
          if #out >= want then return out, last end
        end
      end
      if #entries < 2 * n then break end
    end
  end
  return out, nil
end

local function main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local queue, status = args[3], args[4]
  local bad = name_error(queue, "queue") or check_queue(ctx, queue)
  if bad then return bad end
  if PLAIN[status] == nil and status ~= "available" and status ~= "scheduled"
    and status ~= "retryable" then
    return invalid("unknown status '" .. status .. "'")
  end
  local offset, limit = int(args[5]), int(args[6])
  if offset == nil or offset < 0 then return invalid("offset must be a nonnegative integer") end
  local segs, out = segments(ctx, queue, status, now), nil
  -- (a run of entries that are all of the status's jobs: its offset is a rank, found in O(log N))
  local ranked = segs[2] == nil and segs[1][5] == keep_all
  if offset > OFFSET_MAX and not ranked then
    return invalid("offset must be at most " .. OFFSET_MAX .. " for " .. status
      .. " (page further by cursor)")
  end
  if limit == nil or limit < 1 or limit > 1000 then
    return invalid("limit must be between 1 and 1000")
  end
  local items
  if args[7] == nil then
    out = {"Jobs", fmt(ctx, now)}
    local from, skip = {1, 0}, offset
    if ranked then from, skip = {1, bounds(segs[1]) + offset}, 0 end
    items = scan(ctx, segs, from, skip, limit, math.huge)
    local first = 0
    for _, item in ipairs(items) do
      if item[3] == 1 then first = first + 1 end
    end
    out[3] = first
  else
    local from, err = resume(status, segs, args[7])
    if from == nil then return err end
    local last
    items, last = scan(ctx, segs, from, 0, limit, limit + SCAN_EXTRA)
    out = {"Page", fmt(ctx, now), cursor(status, last)}
  end
  for _, item in ipairs(items) do out[#out + 1] = job_reply(ctx, item[1], item[2]) end
  return out
end

return run_call(KEYS, ARGV, main)
