-- call.lua: what every call goes through: run_call, call records, its ending (finish).

-- uses: core, checks, index, events, flow_control
local CALL_TTL_TEXT, clock, int, invalid = Core.CALL_TTL_TEXT, Core.clock, Core.int, Core.invalid
local key_call, key_cascades, key_paused = Core.key_call, Core.key_cascades, Core.key_paused
local key_q, key_queues, NAME_MAX, NONE = Core.key_q, Core.key_queues, Core.NAME_MAX, Core.NONE
local pcall_typed = Core.pcall_typed
local check_queue, check_types = Checks.check_queue, Checks.check_types
local valid_name = Checks.valid_name
local flush_index = Index.flush_index
local flush_flow = FlowControl.flush_flow
local flush_events, WAKE_MAX = Events.flush_events, Events.WAKE_MAX

-- The record of this call if it was applied before (see "Re-sent calls" above), or nil. A key of
-- another type is no record of ours: it is ignored here and never overwritten. (A record not
-- read because GET was refused would apply a re-sent call twice: pcall_typed raises.)
--
-- A call answered from its record writes nothing of its own, and a durable client's WAIT counts
-- the writes of its own connection (Valkey 9 counts only those): on a connection that never
-- wrote the first delivery's writes (a new one, or another of the pool) it would wait for
-- nothing while they may not be on a replica yet. So the record is written again, as it is (its
-- expiry kept; a state unchanged): that connection's WAIT then covers everything before it.
local function recorded(ctx)
  local value = pcall_typed("GET", key_call(ctx))
  if type(value) ~= "string" then return nil end
  redis.call("SET", key_call(ctx), value, "KEEPTTL")
  -- (a re-sent call's reply says whether the cascade it started still has work: see finish)
  ctx.cascade = ctx.cascade or {resent = true}
  return value
end

local function record(ctx, value)
  redis.call("SET", key_call(ctx), value, "PX", CALL_TTL_TEXT, "NX")
end

-- A call that leaves cascade work replies {"More", reply}: the client carries the work on
-- (resume_cascades.lua) before it hands the reply's result to its caller. Work is left when the cascade
-- this call started (its root: the call id) has some in Redis: this call left it, or, for a
-- re-sent call, the first delivery did and it is not done yet.
-- Before that, what the call buffered is written: its indexes, flows, wake-ups (the tokens of
-- the queues that got claimable jobs), then its events.
local function finish(ctx, reply)
  flush_index(ctx)
  flush_flow(ctx)
  local woken = ctx.woken
  ctx.woken = nil
  for queue, n in pairs(woken or NONE) do
    -- A paused queue's workers are not woken for it (its claims are refused): resume.lua
    -- pushes its tokens then. (Not a set: no pause of ours; pushed as before.)
    if pcall_typed("SISMEMBER", key_paused(ctx), queue) ~= 1 then
      local tokens = {}
      for i = 1, math.min(n, WAKE_MAX) do tokens[i] = "1" end
      local k = key_q(ctx, queue, "wake")
      if redis.call("RPUSH", k, unpack(tokens)) > 2 * WAKE_MAX then
        redis.call("LTRIM", k, -WAKE_MAX, -1)
      end
    end
  end
  flush_events(ctx)
  local cs = ctx.cascade
  if cs and not cs.step and (cs.deferred or (cs.resent
      and type(redis.pcall("ZSCORE", key_cascades(ctx), ctx.args[1])) == "string")) then
    reply = {"More", reply}
  end
  return reply
end

-- The opening of sweep / promote: now, and a limit of 1..10000, or nil and a refusal.
local function maintenance_args(ctx)
  local now, e = clock(ctx.args[2])
  if now == nil then return nil, e end
  local limit = int(ctx.args[3])
  if limit == nil or limit < 1 or limit > 10000 then
    return nil, invalid("limit must be between 1 and 10000")
  end
  local bad = check_types(ctx, {key_queues(ctx)}, "set")
  if bad then return nil, bad end
  return now, limit
end

-- Calls fn(queue, room) for every sound queue of the namespace while done() < limit.
local function each_queue(ctx, limit, done, fn)
  for _, queue in ipairs(redis.call("SMEMBERS", key_queues(ctx))) do
    if done() >= limit then break end
    if valid_name(queue, NAME_MAX) and check_queue(ctx, queue) == nil then
      fn(queue, limit - done())
    end
  end
end

-- Call records of calls answered item by item (report, enqueue each-mode): "+" for an item
-- applied, "=<n>;" and n "<len>:<bytes>" parts for an item refused, so that a re-sent call gets
-- every item's first answer back.
local function encode_items(items)
  local out = {}
  for _, item in ipairs(items) do
    if item == true then
      out[#out + 1] = "+"
    else
      out[#out + 1] = "=" .. #item .. ";"
      for _, part in ipairs(item) do out[#out + 1] = #part .. ":" .. part end
    end
  end
  return table.concat(out)
end

local function decode_items(s)
  local items, i = {}, 1
  while s and i <= #s do
    if string.sub(s, i, i) == "+" then
      items[#items + 1] = true
      i = i + 1
    else
      local semi = string.find(s, ";", i, true)
      local count = tonumber(string.sub(s, i + 1, semi - 1)) or 0
      local item = {}
      i = semi + 1
      for k = 1, count do
        local colon = string.find(s, ":", i, true)
        local len = tonumber(string.sub(s, i, colon - 1))
        item[k] = string.sub(s, colon + 1, colon + len)
        i = colon + len + 1
      end
      items[#items + 1] = item
    end
  end
  return items
end

-- Every call runs through here: the caller's permissions checked, then `main` with a context
-- made for this call alone (see "Per-call state" above), then the buffered writes, events and
-- wake-ups.
-- The check (Redis 7+: redis.acl_check_cmd; Redis 6.2 and fakeredis lack it) comes before
-- anything is written: `uses` lists every command the call may run (the loader reads it from the
-- script's source), its keys all under keys[1]. A refusal names the permission missing (NOPERM,
-- PermissionDenied in Python).
local function run_call(keys, args, main, uses)
  local allowed, root = redis.acl_check_cmd, keys[1]
  for _, cmd in ipairs(allowed and uses or NONE) do
    if not allowed(cmd, root) then
      if allowed(cmd) then
        return redis.error_reply("NOPERM this Redis user may not use the keys " .. root ..
          "* (grant ~" .. root .. "*)")
      end
      return redis.error_reply("NOPERM this Redis user may not run " .. cmd .. " (grant +" ..
        string.lower(cmd) .. ")")
    end
  end
  local ctx = {
    prefix = keys[1], events = keys[2], args = args,
    queue_keys = {}, text_of = {}, names_ok = {}, loaded = {}, changed = {}, implicit_ins = {},
    checked = {},
    -- made at their first use (many calls need none of them):
    int_ok = nil, at_bytes = nil, event_runs = nil, index = nil, index_keys = nil, woken = nil,
    written_again = nil, -- (enqueue.lua: the sequence written again, once)
    flows = nil, -- (flow.lua: groups that got ready jobs, leases begun and ended)
  }
  return finish(ctx, main(ctx))
end
