-- promote_due: make due scheduled and retry-waiting jobs claimable (delayed -> ready), over all
-- queues of the namespace, at most `limit` jobs per call. No state changes: Waiting stays
-- Waiting, RetryWaiting stays RetryWaiting; only the claim index moves.
-- The edge, for one queue, is promote_queue below (by due time); claim.lua runs it on its queue
-- before it picks, after promote_best (best first, for the claim's own pick).
--
-- KEYS[1]  namespace prefix
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] limit (1..10000)
--
-- Replies
--   {"Promoted", now, count}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}

-- uses: core, checks, index, events, job, call, flow_control
local applied, fmt, key_q = Core.applied, Core.fmt, Core.key_q
local writes_error = Checks.writes_error
local zadd, zread, zread_typed, zrem = Index.zadd, Index.zread, Index.zread_typed, Index.zrem
local wake = Events.wake
local blocked, load_job, ready_id = Job.blocked, Job.load_job, Job.ready_id
local ready_member = Job.ready_member
local each_queue, maintenance_args, run_call = Call.each_queue, Call.maintenance_args, Call.run_call
local GROUPED_MIN, ready_add = FlowControl.GROUPED_MIN, FlowControl.ready_add

local PROMOTE_WRITES = {"delayed", "delayed_pr", "ready", wake = true}

-- Moves due jobs of a queue from delayed to ready, at most `limit`. Returns how many, and the
-- refusal that stopped it before any write (a key of the wrong type).
local function promote_queue(ctx, queue, now, limit)
  local ids, bad = zread_typed(ctx, "ZRANGEBYSCORE", key_q(ctx, queue, "delayed"), "-inf",
    fmt(ctx, now), "LIMIT", "0", fmt(ctx, limit))
  if ids == nil then return 0, bad end
  if ids[1] ~= nil then
    bad = writes_error(ctx, queue, PROMOTE_WRITES)
    if bad then return 0, bad end
  end
  local moved = 0
  for _, id in ipairs(ids) do
    local h = load_job(ctx, id)
    zrem(ctx, key_q(ctx, queue, "delayed"), id)
    if h and (h.st == "W" or h.st == "R") and not blocked(h) then
      local member = ready_member(ctx, id, h)
      zrem(ctx, key_q(ctx, queue, "delayed_pr"), member)
      ready_add(ctx, queue, h, member)
      wake(ctx, queue)
      moved = moved + 1
    end
  end
  return moved
end

-- Moves the best due jobs of a queue's delayed_pr to ready, best first, up to `want`: priority
-- value by priority value, from the lowest, each one's due prefix (its members sort by
-- available_at, then enqueue order). Reads at most IDLE_LEVELS values with nothing due, and,
-- past the first value, none ranked after the `want`-th entry of ready (a job of a later value
-- would not be picked this call). Entries move as they are: a job gone or changed since is found
-- out by the claim, which drops or re-indexes what it cannot lease. Grouped jobs (scored past
-- GROUPED_MIN: include/flow_control.lua) take turns rather than go best first: promote_queue moves
-- them, by due time. Returns how many it moved, and the refusal that stopped it before any
-- write.
local function promote_best(ctx, queue, now, want)
  -- How many priority values holding nothing due it reads, at most (docs/lifecycle.md, "Best
  -- first, and its bounds"); a member's due time is its first 6 bytes, big-endian.
  local IDLE_LEVELS, byte = 32, string.byte
  local k, ready = key_q(ctx, queue, "delayed_pr"), key_q(ctx, queue, "ready")
  local last_own = fmt(ctx, GROUPED_MIN - 1)
  local from, upto, idle, moved, checked = "-inf", last_own, 0, 0, false
  while true do
    local entries, bad = zread_typed(ctx, "ZRANGEBYSCORE", k, from, upto, "WITHSCORES", "LIMIT",
      "0", fmt(ctx, want - moved))
    if entries == nil then return moved, bad end
    if entries[1] == nil then break end
    local level, due = entries[2], 0
    for i = 1, #entries, 2 do
      local member = entries[i]
      local a, b, c, d, e, f = byte(member, 1, 6)
      local at = ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
      if entries[i + 1] ~= level or at > now then break end
      if not checked then
        bad = writes_error(ctx, queue, PROMOTE_WRITES)
        if bad then return moved, bad end
        checked = true
      end
      zrem(ctx, k, member)
      zrem(ctx, key_q(ctx, queue, "delayed"), ready_id(member))
      zadd(ctx, ready, level, member)
      wake(ctx, queue)
      due = due + 1
    end
    if due == 0 then idle = idle + 1 end
    moved = moved + due
    if moved >= want or idle >= IDLE_LEVELS then break end
    if from == "-inf" then -- (past the first value: read where ready's own pick ends)
      local last = zread(ctx, "ZRANGE", ready, fmt(ctx, want - 1), fmt(ctx, want - 1), "WITHSCORES")
      if last[2] and tonumber(last[2]) < GROUPED_MIN then upto = last[2] end
    end
    if tonumber(level) >= tonumber(upto) then break end
    from = "(" .. level
  end
  return moved
end

local function main(ctx)
  local now, limit = maintenance_args(ctx)
  if now == nil then return limit end
  local moved = 0
  each_queue(ctx, limit, function() return moved end, function(queue, room)
    moved = moved + promote_queue(ctx, queue, now, room)
  end)
  return applied("Promoted", fmt(ctx, now), fmt(ctx, moved))
end

return run_call(KEYS, ARGV, main)
