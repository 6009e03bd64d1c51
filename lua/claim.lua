-- claim: Waiting / RetryWaiting (due, dependencies met) -> Leased, by queue, up to `limit` jobs.
-- Best first: lowest priority value, then earliest available_at, then enqueue order. Before it
-- picks, it promotes due scheduled jobs of the queue and expires run-out leases of the queue
-- (both bounded), so it never offers a job a claim by id would refuse.
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] queue   ARGV[4] worker id
-- ARGV[5]  lease duration ms   ARGV[6] limit (1..1000)   ARGV[7] call record ttl ms
--
-- Replies
--   {"ClaimsApplied", now, {"Claim", job, token}...}   token = {job_id, input_revision, worker,
--                                                       fence, expires_at, nonce}
--   {"NothingClaimable", next_at}   next_at: when the next delayed job or lease comes due, or ""
--   {"InvalidJob", reason} | {"CorruptKey", key, reason} | {"CorruptJob", id, reason}
-- The nonce of the i-th claim is "<call id>.<i>". A re-sent call (same call id) gets the claims
-- it made, those still held under it, and leases nothing more.

local MAINTENANCE = 100

local function replay(cid, rec)
  local out = {"ClaimsApplied", ""}
  for _, id in ipairs(split(rec)) do
    local h = load_job(id)
    if h and h.st == "L" and h.lc == cid then
      out[#out + 1] = {"Claim", job_reply(id, h), token_reply(id, h)}
    end
  end
  return out
end

local function next_due(queue)
  local best = nil
  for _, what in ipairs({"delayed", "leased"}) do
    local first = redis.call("ZRANGE", key_q(queue, what), 0, 0, "WITHSCORES")
    if first[2] then
      local at = tonumber(first[2])
      if best == nil or at < best then best = at end
    end
  end
  return best and fmt(best) or ""
end

local function take(cid, queue, worker, lease_ms, now, limit)
  local out, ids = {"ClaimsApplied", fmt(now)}, {}
  local members = redis.call("ZRANGE", key_q(queue, "ready"), 0, limit - 1)
  for i, member in ipairs(members) do
    local id = string.sub(member, 31)
    local h, err = load_job(id)
    if h == nil then
      if err[1] ~= "MissingJob" then return err end
      redis.call("ZREM", key_q(queue, "ready"), member)
    elseif (h.st == "W" or h.st == "R") and tonumber(h.pd) == 0
        and tonumber(h.a) < tonumber(h.m) and tonumber(h.at) <= now then
      out[#out + 1] = lease(id, h, worker, lease_ms, now, cid .. "." .. i, cid)
      ids[#ids + 1] = id
    else
      redis.call("ZREM", key_q(queue, "ready"), member) -- an index entry left behind by hand
    end
  end
  return out, ids
end

local function main()
  local cid = ARGV[1]
  local now, e = clock(ARGV[2])
  if now == nil then return e end
  local queue, worker = ARGV[3], ARGV[4]
  if worker == "" then return invalid("worker_id must not be empty") end
  local lease_ms, e2 = int_arg(ARGV[5], "lease_duration")
  if lease_ms == nil then return e2 end
  if lease_ms < 1 then return invalid("lease_duration must be positive") end
  local bad = name_error(queue, "queue") or text_error(worker, "worker_id")
  if bad then return bad end
  local limit = int(ARGV[6])
  if limit == nil or limit < 1 or limit > 1000 then
    return invalid("limit must be between 1 and 1000")
  end
  bad = check_types({key_call(cid)}, "string")
  if bad then return bad end
  local rec = redis.call("GET", key_call(cid))
  if rec then return replay(cid, rec) end
  bad = check_queue(queue)
  if bad then return bad end
  promote_queue(queue, now, MAINTENANCE)
  expire_queue(queue, now, MAINTENANCE, cid, {}, {})
  local out, ids = take(cid, queue, worker, lease_ms, now, limit)
  if ids == nil then return out end
  if #ids == 0 then return refuse("NothingClaimable", next_due(queue)) end
  redis.call("SET", key_call(cid), table.concat(ids, " "), "PX", tonumber(ARGV[7]))
  return out
end

return main()
