-- resume_cascades: carries on the cascade work a call left in Redis (see "Cascades" in include/cascades.lua), one
-- bounded step: at most CASCADE.step dependents visited, each as the call that started the
-- cascade would have visited it (cancelled, or one pending dependency less), their own
-- dependents planned in the room left or left as work in turn. The client of a call that replied
-- {"More", ...} calls it with that call's id until no work is left; a worker's maintenance calls
-- it with "" for the work of calls whose client went away. A damaged dependent is skipped, left
-- untouched, and reported.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)
-- ARGV[3]  root: the id of the call whose cascade to carry on, or "" for any root no call has
--          carried on for CASCADE.idle_ms
--
-- Replies
--   {"Cascaded", now, more, {cancelled ids...}, {damaged ids...}}   more: "1" while work is left
--                                     (of that root; with "": of any idle root), else "0"
--   {"InvalidJob", reason} | {"CorruptKey", key, reason}
-- A re-sent call (same call id) gets the ids the first delivery gave (`more` as it is now), and
-- changes nothing more.

-- uses: core, checks, index, job, call, cascades, callbacks
local applied, clock, fmt, key_cascade = Core.applied, Core.clock, Core.fmt, Core.key_cascade
local key_cascades, key_dependents, key_job = Core.key_cascades, Core.key_dependents, Core.key_job
local split = Core.split
local check_types = Checks.check_types
local flush_args = Index.flush_args
local load_job = Job.load_job
local record, recorded, run_call = Call.record, Call.recorded, Call.run_call
local apply_cascade, CASCADE = Cascades.apply_cascade, Cascades.CASCADE
local cascade_state, plan_cascade = Cascades.cascade_state, Cascades.plan_cascade
local fire_due = Callbacks.fire_due

local CASCADE_KINDS = {c = true, f = true, e = true, s = true}

-- The root to carry on: the one given while it has work, else (given "") one idle the longest.
local function root_of(ctx, given, now)
  if given ~= "" then
    if redis.call("ZSCORE", key_cascades(ctx), given) then return given end
    return nil
  end
  return redis.call("ZRANGEBYSCORE", key_cascades(ctx), "-inf",
    fmt(ctx, now - CASCADE.idle_ms), "LIMIT", "0", "1")[1]
end

-- The parent leaves the root's work: its item count goes down (gone at none).
local function item_done(ctx, pid, ph)
  if ph and redis.call("HINCRBY", key_job(ctx, pid), "cw", "-1") <= 0 then
    redis.call("HDEL", key_job(ctx, pid), "cw")
  end
end

-- The top item of the root's list: up to the room left of its dependents visited (taken out of
-- its set: SPOP), then, for a failed or succeeded parent still there, put back in its
-- dependents set (prune reads it). The item goes back on the list while dependents are left.
-- False when none is left; a refusal when the plan met a damaged key (the dependents taken go
-- back first).
local function step_item(ctx, cs, root, now)
  local list = key_cascade(ctx, root)
  local top = redis.call("RPOP", list)
  if not top then return false end
  local kind, pid = string.sub(top, 1, 1), string.sub(top, 3)
  if not CASCADE_KINDS[kind] or string.sub(top, 2, 2) ~= " " or pid == "" then
    return true -- (not an item of ours: dropped)
  end
  local visits = key_cascade(ctx, root, pid)
  local members = redis.call("SPOP", visits, fmt(ctx, cs.room))
  local ph = load_job(ctx, pid) -- (nil when gone or damaged: visits need it only when failed)
  local plan, bad = plan_cascade(ctx, kind, pid, ph, members)
  if plan == nil then
    if members[1] then flush_args("SADD", visits, members) end
    redis.call("RPUSH", list, top)
    return bad
  end
  apply_cascade(ctx, plan, now)
  if kind ~= "c" and ph then flush_args("SADD", key_dependents(ctx, pid), members) end
  if redis.call("EXISTS", visits) == 1 then
    redis.call("RPUSH", list, top)
  else
    item_done(ctx, pid, ph)
  end
  return true
end

-- A re-sent step's reply, from its record: "<n> <n cancelled ids> <damaged ids>".
local function step_replayed(ctx, rec, given, now)
  local f = split(rec)
  local n = tonumber(f[1]) or 0
  local cancelled, damaged = {}, {}
  for i = 2, #f do
    if i <= n + 1 then cancelled[#cancelled + 1] = f[i] else damaged[#damaged + 1] = f[i] end
  end
  local more = root_of(ctx, given, now) and "1" or "0"
  return applied("Cascaded", "", more, cancelled, damaged)
end

local function resume_cascades_main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local given = args[3] or ""
  local bad = check_types(ctx, {key_cascades(ctx)}, "zset")
  if bad then return bad end
  local again = recorded(ctx)
  if again then return step_replayed(ctx, again, given, now) end
  local root = root_of(ctx, given, now)
  if root == nil then return applied("Cascaded", fmt(ctx, now), "0", {}, {}) end
  bad = check_types(ctx, {key_cascade(ctx, root)}, "list")
  if bad then return bad end
  local cs = cascade_state(ctx)
  cs.root, cs.step, cs.damaged = root, true, {}
  local going = true
  while going == true and cs.room > 0 do going = step_item(ctx, cs, root, now) end
  if type(going) == "table" then return going end
  if redis.call("EXISTS", key_cascade(ctx, root)) == 0 then
    redis.call("ZREM", key_cascades(ctx), root)
  elseif given ~= "" then -- (its caller is still at it: not idle)
    redis.call("ZADD", key_cascades(ctx), "XX", fmt(ctx, now), root)
  end
  record(ctx, #cs.cancelled .. " " .. table.concat(cs.cancelled, " ") .. " "
    .. table.concat(cs.damaged, " "))
  return applied("Cascaded", fmt(ctx, now), root_of(ctx, given, now) and "1" or "0",
    cs.cancelled, cs.damaged)
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, resume_cascades_main(ctx)) end

return run_call(KEYS, ARGV, main)
