-- sweep_expired: expire every lease that ran out, over all queues of the namespace, at most `limit` jobs
-- per call (call again while it reports a full batch). Each job moves as expire.lua moves it
-- (its expire_job). A damaged job hash found in the lease index is reported and left untouched.
-- The sweep of one queue is expire_queue below; claim.lua runs it on its queue before it picks.
-- With the room the leases leave, it then expires the waiting jobs never started whose deadline
-- has come (Waiting -> Expired, expire_unstarted below; claim.lua expires such a job it meets too).
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] limit (1..10000)
--
-- Replies
--   {"Swept", now, {expired ids...}, {damaged ids...}, {ids expired at their deadline...}}
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call sweeps again: leases already expired are not touched twice.

-- uses: core, checks, index, job, cascades, call, expire, callbacks
local applied, fmt, key_q = Core.applied, Core.fmt, Core.key_q
local check_queue = Checks.check_queue
local zread_typed, zrem = Index.zread_typed, Index.zrem
local load_job, past_deadline = Job.load_job, Job.past_deadline
local move_or_fail = Cascades.move_or_fail
local each_queue, maintenance_args, run_call = Call.each_queue, Call.maintenance_args, Call.run_call
local expire_job = Expire.expire_job
local fire_due = Callbacks.fire_due

-- Waiting -> Expired(now) for job `id` (h: as loaded), never started and past its deadline; its
-- dependents by their policy, as for a failed job (cascades.lua). A refusal (a damaged dependent
-- or key: nothing written) or nil. The caller has checked the queue's keys (check_queue).
local function expire_unstarted(ctx, id, h, now)
  return move_or_fail(ctx, id, h, now, {st = "E", fin = fmt(ctx, now)})
end

local function leased(h) return h.st == "L" end

-- How each index is swept: which of its jobs are due (the others' entries were left behind, by
-- hand: they only leave the index) and the edge that moves them.
local SWEEPS = {
  leased = {due = leased, move = expire_job},
  deadlines = {due = past_deadline, move = expire_unstarted},
}

-- Moves the jobs of the queue's index `into.what` (leased, deadlines) due by now, at most
-- `limit`, by SWEEPS[what]; their ids go to `into.out`. Returns `into.out`, and the refusal that
-- stopped it before any write (a key of the wrong type: a move may write any key of the queue, so
-- all are checked when one is due). A damaged job hash is left where it is and reported in
-- `into.damaged`, not touched.
local function sweep_index(ctx, queue, now, limit, into)
  local out, damaged = into.out, into.damaged
  local k, sweep = key_q(ctx, queue, into.what), SWEEPS[into.what]
  local ids, bad = zread_typed(ctx, "ZRANGEBYSCORE", k, "-inf", fmt(ctx, now), "LIMIT", "0",
    fmt(ctx, limit))
  if ids == nil then return out, bad end
  if ids[1] ~= nil then
    bad = check_queue(ctx, queue)
    if bad then return out, bad end
  end
  for _, id in ipairs(ids) do
    local h, err = load_job(ctx, id)
    if h == nil and err[1] ~= "MissingJob" then
      damaged[#damaged + 1] = id
    elseif h == nil or not sweep.due(h, now) then
      zrem(ctx, k, id)
    elseif sweep.move(ctx, id, h, now) then
      damaged[#damaged + 1] = id
    else
      out[#out + 1] = id
    end
  end
  return out
end

-- Expires the leases of a queue that ran out, at most `limit` (see sweep_index).
local function expire_queue(ctx, queue, now, limit, out, damaged)
  return sweep_index(ctx, queue, now, limit, {what = "leased", out = out, damaged = damaged})
end

local function sweep_expired_main(ctx)
  local now, limit = maintenance_args(ctx)
  if now == nil then return limit end
  local out, damaged, past = {}, {}, {}
  local function done() return #out + #past end
  each_queue(ctx, limit, done, function(queue, room)
    expire_queue(ctx, queue, now, room, out, damaged)
  end)
  each_queue(ctx, limit, done, function(queue, room)
    sweep_index(ctx, queue, now, room, {what = "deadlines", out = past, damaged = damaged})
  end)
  return applied("Swept", fmt(ctx, now), out, damaged, past)
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, sweep_expired_main(ctx)) end

return run_call(KEYS, ARGV, main)
