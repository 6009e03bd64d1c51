-- index.lua: sorted-set writes, buffered per call, and the reads that come after them.

-- uses: core
local refuse = Core.refuse

-- Sorted-set writes are buffered: per key, the last write of each member (its score, or false
-- for a removal), in ctx.index[key] (the keys in first-write order in ctx.index_keys; both made
-- at the first write), applied as one ZREM and one ZADD per key by flush_index(), which runs
-- before a script reads a sorted set (zread) and when it is done (finish). The last write of a
-- member decides where it ends, as it would have written one by one.
local INDEX_CHUNK = 1000 -- members per command: unpack() has a limit

local function index_write(ctx, k, member, score)
  local index = ctx.index
  if index == nil then
    index = {}
    ctx.index, ctx.index_keys = index, {}
  end
  local m = index[k]
  if m == nil then
    m = {}
    index[k] = m
    local keys = ctx.index_keys
    keys[#keys + 1] = k
  end
  m[member] = score
end

-- score: an integer as a decimal string (never a Lua number: no float formatting on the way).
local function zadd(ctx, k, score, member) index_write(ctx, k, member, score) end
local function zrem(ctx, k, member) index_write(ctx, k, member, false) end

local function flush_args(cmd, k, args)
  for i = 1, #args, INDEX_CHUNK do
    redis.call(cmd, k, unpack(args, i, math.min(#args, i + INDEX_CHUNK - 1)))
  end
end

local function flush_index(ctx)
  local index, keys = ctx.index, ctx.index_keys
  if index == nil then return end -- nothing buffered
  ctx.index, ctx.index_keys = nil, nil -- (once)
  for _, k in ipairs(keys) do
    local removed, added = {}, {}
    for member, score in pairs(index[k]) do
      if score then
        added[#added + 1] = score
        added[#added + 1] = member
      else
        removed[#removed + 1] = member
      end
    end
    flush_args("ZREM", k, removed)
    flush_args("ZADD", k, added)
  end
end

-- A read of a sorted set, after the buffered writes.
local function zread(ctx, ...)
  flush_index(ctx)
  return redis.call(...)
end

-- zread of a key whose type the call has not checked: a key of another type is a refusal
-- (nil, CorruptKey), as check_types words it, never a script error.
local function zread_typed(ctx, cmd, k, ...)
  flush_index(ctx)
  local reply = redis.pcall(cmd, k, ...)
  if reply.err then
    local kind = redis.call("TYPE", k)["ok"]
    if kind == "zset" or kind == "none" then error(reply.err) end
    return nil, refuse("CorruptKey", k, "holds a " .. kind .. ", expected a zset")
  end
  return reply
end

