-- cascades.lua: a job's dependents visited when it is cancelled, fails or succeeds.

-- uses: core, checks, index, job
local fmt, key_cascade, key_cascades = Core.fmt, Core.key_cascade, Core.key_cascades
local key_dependents, key_job, NONE, num = Core.key_dependents, Core.key_job, Core.NONE, Core.num
local TERMINAL = Core.TERMINAL
local check_types, id_error = Checks.check_types, Checks.id_error
local flush_args = Index.flush_args
local blocked, load_job, move = Job.blocked, Job.load_job, Job.move

-- Cascades
-- When a job is cancelled, fails or succeeds, its dependents are visited: a cancelled job's live
-- dependents are cancelled (and theirs, transitively), so are a failed job's dependents that
-- asked for it, and a succeeded job's waiting dependents count one pending dependency less
-- (released at none); a dependent under "run" counts one less whatever way its dependency ended,
-- and is never cancelled (a cascade does not go on through it). A call visits at most
-- CASCADE.step dependents in all, so that no call holds Redis long whatever the tree: a parent
-- whose dependents do not fit in the room left is left as cascade work under the call's root
-- (its call id):
--   cascades                 zset: roots with work left, by when their caller last carried it on
--   cascade:<root>           list: the root's items, "<kind> <parent id>" (kind: c cancelled,
--                            f failed, e expired, s succeeded)
--   cascade:<root> <parent>  set: the parent's dependents still to visit (its dependents set,
--                            renamed: a dependent enqueued since is not visited, as it was not
--                            there when the parent moved)
-- and the parent's hash counts its items left in `cw`. The call replies {"More", reply}
-- (finish); resume_cascades.lua carries the work on, step by step: the caller's client at once, and a
-- worker's maintenance once a root has been idle for CASCADE.idle_ms (its caller went away).
-- Until the cascade reaches a dependent, the dependent stays blocked (it still counts the parent
-- among its pending dependencies): nothing runs early, and get names the parent it waits on.
-- CASCADE.step: the dependents a call visits at most; idle_ms: how long a root waits for its
-- caller before a worker's maintenance takes it up; reason: what a cancelled dependent says;
-- none: the plan of a parent with no dependents.
local CASCADE = {step = 50, idle_ms = 5000,
  reason = {c = " was cancelled", f = " failed", e = " expired"},
  none = {visits = NONE, inline = NONE, deferred = NONE}}

-- The call's cascade state, ctx.cascade (made at the first parent with dependents: most calls
-- never need it): the room left, the root, the ids this call cancelled, whether it left work;
-- a step of resume_cascades.lua (step) lists the damaged dependents it skipped (damaged).
local function cascade_state(ctx)
  local cs = ctx.cascade
  if cs == nil or cs.room == nil then
    cs = {room = CASCADE.step, root = ctx.args[1], cancelled = {}, deferred = false,
      resent = cs ~= nil and cs.resent, step = false, damaged = nil}
    ctx.cascade = cs
  end
  return cs
end

-- Whether dependent dh already counted dependency pid as resolved though it did not succeed
-- (policy "run": field rd lists those, so that a retried dependency ending again, in success or
-- not, does not release the dependent a second time).
local function counted(dh, pid)
  local rd = dh.rd
  return rd ~= nil and string.find(" " .. rd .. " ", " " .. pid .. " ", 1, true) ~= nil
end

-- What visiting dependent dh of parent pid (ph: its hash, nil when gone) does for an item of
-- `kind`: "C" and the reason, "R" (one pending dependency less), or nil. A failed parent retried
-- and succeeded while its item waited releases the dependents that did not ask to be cancelled.
-- A dependent under "run" counts a parent that ended in any way as resolved: it is released,
-- never cancelled, so a cancellation's cascade stops there.
local function visit_action(kind, pid, ph, dh)
  if TERMINAL[dh.st] then return nil end
  if dh.odf == "run" then
    if (dh.st == "W" or dh.st == "R") and blocked(dh) and not counted(dh, pid) then return "R" end
    return nil
  end
  if kind == "c" or ((kind == "f" or kind == "e") and dh.odf == "cancel") then
    return "C", "dependency " .. pid .. CASCADE.reason[kind]
  end
  if (kind == "s" or (ph and ph.st == "S")) and (dh.st == "W" or dh.st == "R") and blocked(dh) then
    return "R"
  end
  return nil
end

-- The jobs of ids as {id, h}: a missing one is skipped (pruned); a damaged one refuses the call
-- (nil and the refusal) or, in a step of resume_cascades.lua, is listed in cs.damaged and skipped.
local function load_visited(ctx, cs, ids)
  local out = {}
  for _, id in ipairs(ids) do
    local h, err = load_job(ctx, id)
    if h then
      out[#out + 1] = {id, h}
    elseif err[1] ~= "MissingJob" then
      if cs.damaged == nil then return nil, err end
      cs.damaged[#cs.damaged + 1] = id
    end
  end
  return out
end

-- The plan of a cascade from parent `id` of `kind` (h: its hash as loaded, before its own move),
-- read and checked before any write, breadth first over the dependents the call has room for:
-- {visits = {{id, h, "C" | "R", reason}...}, inline = {items whose dependents all fit},
-- deferred = {items left as work}}, an item being {kind, id, h, members, visited}: a parent
-- whose dependents do not fit is deferred, those the room left takes (SRANDMEMBER) visited now.
-- members: the dependents to visit (a step's), else those of the parent's dependents set.
local function plan_cascade(ctx, kind, id, h, members)
  if members == nil and not h.hd then return CASCADE.none end
  local cs = cascade_state(ctx)
  local room = cs.room
  local plan, seen = {visits = {}, inline = {}, deferred = {}}, {[id] = true}
  -- (a "run" dependent of several parents of the cascade is released once by each: its visits
  -- share one table, so that the writes compose)
  local held = {}
  local items, next_item = {{kind, id, h, members}}, 1 -- (read by index: see load_visited)
  while next_item <= #items do
    local item = items[next_item]
    items[next_item] = false
    next_item = next_item + 1
    local ids = item[4]
    if ids == nil and item[3].hd then
      local n = redis.call("SCARD", key_dependents(ctx, item[2]))
      if n > cs.room then
        plan.deferred[#plan.deferred + 1] = item
        if cs.room > 0 then
          ids = redis.call("SRANDMEMBER", key_dependents(ctx, item[2]), fmt(ctx, cs.room))
          item[5] = ids
        end
      elseif n > 0 then
        ids = redis.call("SMEMBERS", key_dependents(ctx, item[2]))
        plan.inline[#plan.inline + 1] = item
      end
    end
    local deps, err = load_visited(ctx, cs, ids or NONE)
    if deps == nil then
      cs.room = room
      return nil, err
    end
    cs.room = cs.room - #(ids or NONE)
    for _, d in ipairs(deps) do
      local did = d[1]
      local dh = held[did] or d[2]
      local action, reason = visit_action(item[1], item[2], item[3], dh)
      if action == "R" then
        -- (a "run" dependent released by a parent that did not succeed notes it: see counted)
        local early = dh.odf == "run" and item[1] ~= "s" and not (item[3] and item[3].st == "S")
        held[did] = dh
        plan.visits[#plan.visits + 1] = {did, dh, "R", early and item[2] or nil, item[1] == "c"}
      elseif action == "C" and not seen[did] then
        seen[did] = true
        plan.visits[#plan.visits + 1] = {did, dh, "C", reason}
        items[#items + 1] = {"c", did, dh}
      end
    end
  end
  if plan.deferred[1] then
    local bad = id_error(cs.root, "call id") or check_types(ctx, {key_cascades(ctx)}, "zset")
      or check_types(ctx, {key_cascade(ctx, cs.root)}, "list")
    if bad then
      cs.room = room
      return nil, bad
    end
  end
  return plan
end

-- Writes a plan, once the parent has moved: each visit ({id, h, "C", reason} or {id, h, "R",
-- the parent a "run" dependent notes in rd, whether that parent was cancelled}); the dependents
-- sets of the cancelled parents whose dependents were all visited go (they can never run; those
-- under "run" are put back); the deferred parents are
-- left as work (their dependents sets renamed less those visited, which a failed or succeeded
-- parent keeps in a new one; their items listed; the root registered).
local function apply_cascade(ctx, plan, now)
  local cs = ctx.cascade
  for _, v in ipairs(plan.visits) do
    local did, dh = v[1], v[2]
    if v[3] == "C" then
      move(ctx, did, dh, now, {st = "C", cr = v[4], fin = fmt(ctx, now)})
      cs.cancelled[#cs.cancelled + 1] = did
    elseif v[4] then
      move(ctx, did, dh, now, {pd = fmt(ctx, num(dh.pd) - 1), rd = dh.rd and dh.rd .. " " .. v[4]
        or v[4]})
    else
      move(ctx, did, dh, now, {pd = fmt(ctx, num(dh.pd) - 1)})
    end
  end
  for _, item in ipairs(plan.inline) do
    if item[1] == "c" then redis.call("DEL", key_dependents(ctx, item[2])) end
  end
  for _, item in ipairs(plan.deferred) do
    local pid, visits = item[2], key_cascade(ctx, cs.root, item[2])
    redis.call("RENAME", key_dependents(ctx, pid), visits)
    if item[5] then
      flush_args("SREM", visits, item[5])
      if item[1] ~= "c" then flush_args("SADD", key_dependents(ctx, pid), item[5]) end
    end
    redis.call("HINCRBY", key_job(ctx, pid), "cw", "1")
    redis.call("RPUSH", key_cascade(ctx, cs.root), item[1] .. " " .. pid)
  end
  if plan.deferred[1] then
    redis.call("ZADD", key_cascades(ctx), "NX", fmt(ctx, now), cs.root)
    cs.deferred = true
  end
  -- A cancelled parent keeps, in its dependents set, those that run anyway (for inspection).
  for _, v in ipairs(plan.visits) do
    if v[5] then redis.call("SADD", key_dependents(ctx, v[4]), v[1]) end
  end
end

-- The cascade item kind of a state that lets a dependent's policy decide (Failed, Expired).
local FAILING = {F = "f", E = "e"}

-- Moves a job by `changes`; when that enters Failed or Expired, also cancels the dependents that
-- asked for it (and theirs); the rest stay blocked, visibly. Everything the call visits is
-- checked (loaded) before the first write; a refusal or nil.
local function move_or_fail(ctx, id, h, now, changes)
  local plan = CASCADE.none
  local kind = FAILING[changes.st]
  if kind then
    local err
    plan, err = plan_cascade(ctx, kind, id, h)
    if plan == nil then return err end
  end
  move(ctx, id, h, now, changes)
  apply_cascade(ctx, plan, now)
  return nil
end

