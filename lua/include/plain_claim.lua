-- plain_claim.lua: the claim an idle worker makes when jobs come, at little more than the cost of
-- its commands.
--
-- A claim by queue (claim.lua) that needs none of the general way's work: not a re-sent call (no
-- record of its call id), of a queue neither paused nor with flow settings (no rate, cap, hold
-- or group), with nothing due in its delayed index and no lease run out, whose first `limit`
-- entries of ready are plain waiting jobs: waiting (not retrying), due, not blocked, attempts
-- left, no deadline, group or batch, and every field as claim.lua's load wants it. It leases
-- them as claim.lua does (the same fields, index entries, event, call record and reply), but
-- makes none of a call's tables: Lua's collector costs Redis time for every byte a call
-- allocates (see plain_enqueue.lua). A queue with no ready job at all gets claim.lua's
-- NothingClaimable, as the general way answers it (and, as there, nothing written): the claim
-- of a worker that finds its queue empty. Its guarantees are the general way's:
--
-- - Everything before the first write is a read, each a redis.pcall. A claim any of them does
--   not find plain goes the general way (`fast` returns nil, having written nothing), which
--   makes it from the same state: due work, a paused queue, a re-sent call, a key of another
--   type, a damaged job, a key or command the caller's ACL refuses.
-- - Its writes go to keys whose types its reads found (the job hashes, ready, leased, the call
--   record: none), but for the event, which comes first: a stream key of another type refuses it
--   before anything is written. On Redis 7+ each write's command is checked against the caller's
--   ACL with its own key before the first write, so no write after the first is refused; Redis
--   6.2 has no such check, and refuses a command where a script runs it (as the general way is
--   refused there).

-- uses: core, checks, events, job, lease, flow_control
local CALL_TTL_TEXT, clock, int, NAME_MAX = Core.CALL_TTL_TEXT, Core.clock, Core.int, Core.NAME_MAX
local num, SMALL_NUM, TEXT_MAX = Core.num, Core.SMALL_NUM, Core.TEXT_MAX
local valid_name = Checks.valid_name
local EVENTS_MAX = Events.EVENTS_MAX
local NUMERIC, not_integer, ready_id = Job.NUMERIC, Job.not_integer, Job.ready_id
local STATUS_OF = Job.STATUS_OF
local token_record = Lease.token_record
local GROUPED_MIN = FlowControl.GROUPED_MIN

-- The heads of delayed and leased (their first entries read WITHSCORES) when the queue whose
-- keys start with `kq` has nothing due in either and no flow settings, else nil: what a claim
-- needs to know besides ready to skip the general way's maintenance (claim.lua's claim_queue
-- skips it so too). Each read a redis.pcall: one refused (a key of another type, the ACL) is nil.
-- delayed_pr, which holds what delayed holds by priority, is read for its type alone: the
-- general way reads it first, and refuses another type.
local function quiet(kq, now)
  if redis.pcall("EXISTS", kq .. "flow") ~= 0
      or redis.pcall("ZRANGE", kq .. "delayed_pr", "0", "0").err then
    return nil
  end
  local delayed = redis.pcall("ZRANGE", kq .. "delayed", "0", "0", "WITHSCORES")
  local leased = redis.pcall("ZRANGE", kq .. "leased", "0", "0", "WITHSCORES")
  if delayed.err or leased.err or (delayed[2] and tonumber(delayed[2]) <= now)
      or (leased[2] and tonumber(leased[2]) <= now) then
    return nil
  end
  return delayed, leased
end

-- claim.lua's NothingClaimable for a queue with no ready job: when the next delayed job or lease
-- comes due (the earlier of the heads quiet read), or "". The event stream is the one key
-- the general way checks that no read here has met: one of another type, or refused, declines.
local function nothing(events, delayed, leased)
  if events then
    local kind = redis.pcall("TYPE", events)
    if kind.ok ~= "stream" and kind.ok ~= "none" then return nil end
  end
  local a, b = tonumber(delayed[2]), tonumber(leased[2])
  local next_at = a and b and math.min(a, b) or a or b
  return {"NothingClaimable", next_at and string.format("%d", next_at) or ""}
end

-- The lease of the job loaded as `raw` (its HGETALL reply), the n-th of the call, as HSET
-- arguments after the key, and the token its call record keeps, or nil when claim.lua would not
-- lease it as it is: not plain, not claimable now, or a field its load would refuse. grant: what
-- the call's leases share (the worker, the expiry and start as text, the call id).
local function plain_lease(raw, queue, now, grant, n)
  local st, s, sq, at, a, m, f, rv, q, pd = nil, nil, nil, nil, "0", "3", "0", "0", nil, nil
  for i = 1, #raw, 2 do
    local k, v = raw[i], raw[i + 1]
    if NUMERIC[k] and not SMALL_NUM[v] and not_integer(v) then return nil end
    if k == "st" then st = v
    elseif k == "s" then s = v
    elseif k == "sq" then sq = v
    elseif k == "at" then at = v
    elseif k == "a" then a = v
    elseif k == "m" then m = v
    elseif k == "f" then f = v
    elseif k == "rv" then rv = v
    elseif k == "q" then q = v
    elseif k == "pd" then pd = v
    elseif k == "dl" or k == "g" or k == "bt" then return nil
    end
  end
  if st ~= "W" or s == nil or sq == nil or at == nil or (q or "default") ~= queue
      or (pd ~= nil and pd ~= "0") or num(a) >= num(m) or tonumber(at) > now then
    return nil
  end
  local fence, nonce, x = string.format("%d", num(f) + 1), grant.call_id .. "." .. n, grant.x
  local fields = {"st", "L", "a", string.format("%d", num(a) + 1), "f", fence, "w", grant.worker,
    "x", x, "n", nonce, "att", grant.at}
  return fields, token_record(fence, x, nonce, rv)
end

-- claim.lua's call (KEYS, ARGV: see there) when it is plain, or nil, having written nothing,
-- for run_call to make it the general way.
local function fast(keys, args)
  if #args ~= 6 then return nil end
  local call_id, queue, worker = args[1], args[3], args[4]
  local lease_ms, limit = int(args[5]), int(args[6])
  if lease_ms == nil or lease_ms < 1 or limit == nil or limit < 1 or limit > 1000
      or worker == "" or #worker > TEXT_MAX or not valid_name(queue, NAME_MAX) then
    return nil
  end
  local timed, now = pcall(clock, args[2]) -- (TIME refused: the general way says so)
  if not (timed and now) then return nil end
  local prefix, events = keys[1], keys[2]
  local kq, kcall = prefix .. "q:" .. queue .. ":", prefix .. "call:" .. call_id
  -- the reads: the jobs at the head of ready, not re-sent, not paused, then quiet's
  local ready = redis.pcall("ZRANGE", kq .. "ready", "0", string.format("%d", limit - 1),
    "WITHSCORES")
  if ready.err or redis.pcall("GET", kcall) ~= false
      or redis.pcall("SISMEMBER", prefix .. "paused", queue) ~= 0 then
    return nil
  end
  local delayed, leased = quiet(kq, now)
  if delayed == nil then return nil end
  if ready[1] == nil then return nothing(events, delayed, leased) end
  local now_text = string.format("%d", now)
  local x = string.format("%d", now + lease_ms)
  local grant = {worker = worker, x = x, at = now_text, call_id = call_id}
  local out, members, leased, jobs, attempts, rec, leases = {"ClaimsApplied", now_text}, {}, {},
    {}, {}, {}, {}
  local seen = {}
  for i = 1, #ready, 2 do
    if tonumber(ready[i + 1]) >= GROUPED_MIN then return nil end
    local member = ready[i]
    local id = ready_id(member)
    if seen[id] then return nil end -- (two entries of one job, left by hand: the general way)
    seen[id] = true
    local raw = redis.pcall("HGETALL", prefix .. "job:" .. id)
    if raw.err or raw[1] == nil then return nil end
    local n = #jobs + 1
    local fields, token = plain_lease(raw, queue, now, grant, n)
    if fields == nil then return nil end
    out[#out + 1], out[#out + 2] = id, raw
    members[n], jobs[n], attempts[n], leases[n] = member, id, fields[4], fields
    leased[2 * n - 1], leased[2 * n] = x, id
    rec[n] = id .. " " .. token
  end
  local allowed = redis.acl_check_cmd -- (Redis 7+, Valkey)
  if allowed then
    if (events and not allowed("XADD", events)) or not allowed("ZREM", kq .. "ready")
        or not allowed("ZADD", kq .. "leased") or not allowed("SET", kcall) then
      return nil
    end
    for _, id in ipairs(jobs) do
      if not allowed("HSET", prefix .. "job:" .. id) then return nil end
    end
  end
  -- the writes: the event first (a stream of another type refuses it), then the lease
  if events then
    local entries = string.format("%d", math.max(1, math.floor(EVENTS_MAX / #jobs)))
    local added = redis.pcall("XADD", events, "MAXLEN", "~", entries, "*", "job",
      table.concat(jobs, " "), "ev", STATUS_OF.L, "q", queue, "a", table.concat(attempts, " "))
    if type(added) == "table" then return nil end
  end
  redis.call("ZREM", kq .. "ready", unpack(members))
  for n, id in ipairs(jobs) do redis.call("HSET", prefix .. "job:" .. id, unpack(leases[n])) end
  redis.call("ZADD", kq .. "leased", unpack(leased))
  redis.call("SET", kcall, table.concat(rec, " "), "PX", CALL_TTL_TEXT, "NX")
  return out
end
