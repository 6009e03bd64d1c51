-- _lib.lua: the steps the scripts share, prepended at load time (no include language). Each
-- script's own file shows its edge: its checks in order and its writes, calling these steps.
--
-- Conventions
--   KEYS[1]  the namespace key prefix, e.g. "quasar:{orders}:", or "quasar:{shop}/orders:" given
--            a tag (quasar_redis/_keys.py). Every key a script touches is KEYS[1] .. suffix, so
--            every key keeps the namespace hash tag (one cluster slot).
--   KEYS[2]  optional: the namespace's event stream (KEYS[1] .. "events"). When given, every state
--            change appends {job, ev, q, a} to it, ev the status the job enters (capped near
--            EVENTS_MAX job changes).
--   ARGV[1]  call id: random, made by the client per call; a re-sent call carries the same one.
--   ARGV[2]  "now" in integer milliseconds, or "" for the Redis server clock (the default).
--   Integers travel as decimal strings and are formatted back with "%d" (never tostring, which
--   turns large numbers into floats).
--   Replies are arrays whose first element is a readable tag; refusals come from refuse(), applied
--   replies from applied(). In Python, quasar_redis/_calls.py builds each call (its arguments
--   encoded by _args.py) and _replies.py decodes each reply through one vocabulary of tags, the
--   jobs in it read by _fast.py (the common replies) or _general.py (any other shape).
--   A script checks everything before its first write: Redis has no rollback. Calls made of many
--   transitions (a claim of many jobs, a report, an enqueue in "each" mode) check each one before
--   its own first write: a refused one is skipped whole, never half-written.
--
-- Job hash fields (a hash at KEYS[1].."job:"..id; the id is the key suffix):
--   q queue, s stage, p payload (msgpack bytes), ir input_ref, rv input_revision,
--   dp dependencies (space-separated ids), pd dependencies not yet succeeded, odf on-dependency-
--   failure policy ("block" | "cancel"), pr priority, sq enqueue sequence, a attempt,
--   m max_attempts, f fencing_version, st state tag (W R L S F C), at available_at (W, R),
--   w worker, x lease expires_at, n lease nonce (L), ek / em last error kind / message,
--   cr cancel reason, o output_ref, res result (msgpack bytes), ins inserted_at,
--   att attempted_at, fin finished_at (S, F, C), hd "1" once another job depends on this one
--   (so that jobs nobody depends on never read their dependents set), ec the id of the call that
--   enqueued it (a re-sent enqueue finds its jobs by it).
-- Memory: a field holding its default (DEFAULTS below) is not stored, nor inserted_at while it
-- equals available_at (a job enqueued without a delay), and the payload and the
-- result are stored in chunks of at most 64 bytes (p, p2, p3, ... / res, res2, ...), up to
-- BLOB_CHUNKS of them: so a job with a small payload stays within Redis's compact hash encoding
-- (hash-max-listpack-value 64), less than half the memory of a hash that leaves it.
--
-- Re-sent calls: every applied transition writes a call record KEYS[1].."call:"..cid (a string,
-- CALL_TTL_MS); a call whose record exists is a re-sent one and gets the first delivery's outcome
-- again (the same tag, the same lease token; the job as it is now), changing nothing. Refusals
-- write nothing, so a re-sent refused call is simply evaluated again.
--
-- Per-call state: run_call makes one context value per call (ctx, first argument of every step
-- that needs it): the call's keys and arguments, the keys, jobs and checks it has met so far, and
-- its buffered writes, events and wake-ups. Nothing else changes after load: a function library
-- runs its top-level code once, at FUNCTION LOAD, so a top-level variable set by one call would
-- still hold it in the next.
--   ctx.prefix KEYS[1]   ctx.events KEYS[2] (or nil)   ctx.args ARGV (ARGV[1]: the call id)
--   the rest: caches and buffers, each described where it is used. (At most 16 fields: a table
--   of more takes twice the memory, and a call pays for making it.)

local MAXINT = 1125899906842624 -- 2^50: every integer field and argument stays exact in a double
local ID_MAX = 256
local NAME_MAX = 64
local STAGE_MAX = 128
local TEXT_MAX = 8192
local PRIORITY_MIN = -1000000
local PRIORITY_MAX = 1000000

local CALL_TTL_MS = 60000
-- Numbers given to redis.call go as text: Redis formats a Lua number with snprintf("%.17g").
local CALL_TTL_TEXT = "60000"
-- The stream keeps about EVENTS_MAX job changes: an entry lists a run of them (up to a whole
-- batch), so each XADD trims to EVENTS_MAX / (the changes in its own entry) entries, at least 1.
local EVENTS_MAX = 10000
local WAKE_MAX = 16
local WAKE_KEEP = "-16" -- (LTRIM's start: the last WAKE_MAX tokens)

local function key_job(ctx, id) return ctx.prefix .. "job:" .. id end
local function key_dependents(ctx, id) return ctx.prefix .. "dependents:" .. id end
-- The key of this call's record (see "Re-sent calls" above).
local function key_call(ctx) return ctx.prefix .. "call:" .. ctx.args[1] end
-- The namespace's queue set and enqueue sequence.
local function key_queues(ctx) return ctx.prefix .. "queues" end
local function key_seq(ctx) return ctx.prefix .. "seq" end
-- Cascade work (see "Cascades" below): the namespace's roots with work left, a root's items, and
-- an item's dependents still to visit. A root is the id of the call that started the cascade and
-- holds no whitespace, nor does a job id: no two of these keys can be the same.
local function key_cascades(ctx) return ctx.prefix .. "cascades" end
-- (the list of a root's items, or with `id` the set of that parent's dependents still to visit)
local function key_cascade(ctx, root, id)
  if id == nil then return ctx.prefix .. "cascade:" .. root end
  return ctx.prefix .. "cascade:" .. root .. " " .. id
end
-- The names of the namespace's paused queues (pause.lua, resume.lua). (The worker registry's
-- keys are announce.lua's registry_keys.)
local function key_paused(ctx) return ctx.prefix .. "paused" end
-- Queue keys are built once per call (a claim or report names the same few per job), in
-- ctx.queue_keys[queue][what].
local function key_q(ctx, queue, what)
  local by_queue = ctx.queue_keys
  local keys = by_queue[queue]
  if keys == nil then
    keys = {}
    by_queue[queue] = keys
  end
  local k = keys[what]
  if k == nil then
    k = ctx.prefix .. "q:" .. queue .. ":" .. what
    keys[what] = k
  end
  return k
end

-- Small integers and their text, looked up rather than formatted or parsed (attempts, fences,
-- counts: most integers a transition handles). Anything else goes through format / tonumber.
local SMALL_TEXT, SMALL_NUM = {}, {}
for i = 0, 32 do -- (a function library runs this at load, where no library table is reachable)
  SMALL_TEXT[i] = "" .. i
  SMALL_NUM[SMALL_TEXT[i]] = i
end

-- An integer as text; other integers formatted in this call are kept in ctx.text_of (a batch
-- formats the same now, the same expiry, ...).
local function fmt(ctx, n)
  local text = SMALL_TEXT[n]
  if text == nil then
    local text_of = ctx.text_of
    text = text_of[n]
    if text == nil then
      text = string.format("%d", n)
      text_of[n] = text
    end
  end
  return text
end

-- The number in a stored integer field (checked when the job was loaded).
local function num(s) return SMALL_NUM[s] or tonumber(s) end

-- redis.pcall for a key that may hold another type: a WRONGTYPE error comes back (the caller
-- says what is wrong), any other (a command or key the user's ACL refuses) is raised, never
-- taken for an absent or damaged value.
local function pcall_typed(...)
  local reply = redis.pcall(...)
  if type(reply) == "table" and reply.err and not string.find(tostring(reply.err), "WRONGTYPE", 1, true) then
    error(reply)
  end
  return reply
end

-- The record of this call if it was applied before (see "Re-sent calls" above), or nil. A key of
-- another type is no record of ours: it is ignored here and never overwritten. (A record not
-- read because GET was refused would apply a re-sent call twice: pcall_typed raises.)
local function recorded(ctx)
  local value = pcall_typed("GET", key_call(ctx))
  if type(value) ~= "string" then return nil end
  -- (a re-sent call's reply says whether the cascade it started still has work: see finish)
  ctx.cascade = ctx.cascade or {resent = true}
  return value
end

local function record(ctx, value)
  redis.call("SET", key_call(ctx), value, "PX", CALL_TTL_TEXT, "NX")
end

local function refuse(tag, ...) return {tag, ...} end
local function applied(tag, ...) return {tag, ...} end

local function invalid(reason) return refuse("InvalidJob", reason) end

-- An integer from a decimal string, or nil.
local function int(s)
  if type(s) ~= "string" or #s == 0 or #s > 17 or not string.find(s, "^%-?%d+$") then
    return nil
  end
  local n = tonumber(s)
  if n > MAXINT or n < -MAXINT then return nil end
  return n
end

-- An integer argument: the value, or nil and an InvalidJob refusal saying what to fix.
local function int_arg(s, what)
  local n = int(s)
  if n == nil then
    return nil, invalid(what .. " must be an integer between -2^50 and 2^50")
  end
  return n
end

-- A duration argument (ms): the value, or nil and an InvalidJob refusal (integer, >= min).
local function duration_arg(s, what, min)
  local n, e = int_arg(s, what)
  if n == nil then return nil, e end
  if n < min then
    return nil, invalid(what .. (min > 0 and " must be positive" or " must be nonnegative"))
  end
  return n
end

local function clock(arg)
  if arg == nil or arg == "" then
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local n = int(arg)
  if n == nil or n < 0 then return nil, invalid("now must be a nonnegative integer") end
  return n
end

local function valid_name(s, max)
  return type(s) == "string" and #s >= 1 and #s <= max and string.find(s, "^[%w_%.%-]+$") ~= nil
end

local function name_error(s, what)
  if not valid_name(s, NAME_MAX) then
    return invalid(what .. " must be 1-" .. NAME_MAX .. " characters of letters, digits, '_', '.', '-'")
  end
  return nil
end

local function stage_error(s)
  if #s > STAGE_MAX or not string.find(s, "^[%w_%.%-:]+$") then
    return invalid("stage must be at most " .. STAGE_MAX .. " characters of letters, digits, '_', '.', '-', ':'")
  end
  return nil
end

-- What an id may hold (docs/lifecycle.md, "Job ids"): 1 to ID_MAX bytes of UTF-8 text without
-- whitespace, control or format characters: no code point of Unicode's categories Zs, Zl, Zp,
-- Cc or Cf (as of Unicode 15.0). An ASCII id needs one pattern match; any other is decoded,
-- strictly (no overlong forms, no surrogates, nothing past U+10FFFF), and each code point looked
-- up in ID_REFUSED, ranges {low, high, low, high, ...}. quasar_redis/_ids.py holds the same rule
-- and table (a test checks that they agree).
local function id_error(s, what)
  if #s == 0 then return invalid(what .. " must not be empty") end
  if #s > ID_MAX then return invalid(what .. " must be at most " .. ID_MAX .. " bytes") end
  local bad = nil -- the first refused code point, or -1 when the id is not UTF-8
  if not string.find(s, "[\128-\255]") then
    bad = string.find(s, "[%c ]") and string.byte(s, string.find(s, "[%c ]")) -- (controls, space)
  else
    local ID_REFUSED = {0x0, 0x20, 0x7F, 0xA0, 0xAD, 0xAD, 0x600, 0x605, 0x61C, 0x61C, 0x6DD,
      0x6DD, 0x70F, 0x70F, 0x890, 0x891, 0x8E2, 0x8E2, 0x1680, 0x1680, 0x180E, 0x180E, 0x2000,
      0x200F, 0x2028, 0x202F, 0x205F, 0x2064, 0x2066, 0x206F, 0x3000, 0x3000, 0xFEFF, 0xFEFF,
      0xFFF9, 0xFFFB, 0x110BD, 0x110BD, 0x110CD, 0x110CD, 0x13430, 0x1343F, 0x1BCA0, 0x1BCA3,
      0x1D173, 0x1D17A, 0xE0001, 0xE0001, 0xE0020, 0xE007F}
    local byte, i, n = string.byte, 1, #s
    while i <= n and bad == nil do
      local c, cp, len = byte(s, i), nil, nil
      if c < 0x80 then cp, len = c, 1
      elseif c >= 0xC2 and c <= 0xDF then cp, len = c - 0xC0, 2
      elseif c >= 0xE0 and c <= 0xEF then cp, len = c - 0xE0, 3
      elseif c >= 0xF0 and c <= 0xF4 then cp, len = c - 0xF0, 4
      else cp, len = -1, 1 end
      for k = i + 1, i + len - 1 do
        local b = byte(s, k)
        if cp < 0 or b == nil or b < 0x80 or b > 0xBF then cp = -1 else cp = cp * 64 + b - 0x80 end
      end
      if cp < 0 or (len == 3 and (cp < 0x800 or (cp >= 0xD800 and cp <= 0xDFFF)))
          or (len == 4 and (cp < 0x10000 or cp > 0x10FFFF)) then
        bad = -1
      else
        for r = 1, #ID_REFUSED, 2 do
          if cp < ID_REFUSED[r] then break end
          if cp <= ID_REFUSED[r + 1] then bad = cp end
        end
      end
      i = i + len
    end
  end
  if bad == -1 then return invalid(what .. " must be UTF-8 text") end
  if bad then
    return invalid(what .. " must not contain whitespace, control or format characters ("
      .. string.format("U+%04X", bad) .. ")")
  end
  return nil
end

-- The ready index keeps available_at in 11 hex digits: times stay below 16^11 ms (year 2527).
local MAX_TIME = 17592186044415
local MAX_TIME_TEXT = "17592186044415"

local function time_error(at, what)
  if at > MAX_TIME then
    return invalid(what .. " must be before " .. MAX_TIME_TEXT .. " (ms since the epoch, year 2527)")
  end
  return nil
end

local function text_error(s, what)
  if #s > TEXT_MAX then return invalid(what .. " must be at most " .. TEXT_MAX .. " bytes") end
  return nil
end

local function split(s)
  local out = {}
  for part in string.gmatch(s, "%S+") do out[#out + 1] = part end
  return out
end

-- Loading and checking job hashes --------------------------------------------------------------

local DEFAULTS = {rv = "0", a = "0", f = "0", pd = "0", dp = "", ir = "inline", odf = "block",
  pr = "0", m = "3", q = "default"}
-- Fields that must hold integers, and those each state needs.
local NUMERIC = {rv = true, pd = true, pr = true, sq = true, a = true, m = true, f = true,
  ins = true, at = true, x = true, fin = true, att = true}
local STATE_NEEDS = {W = "at", R = "at", L = "x", S = "fin", F = "fin", C = "fin"}
local NONE = {} -- an empty list, never written to
local CHUNK = 64
local BLOB_CHUNKS = 16
local BLOBS = {p = true, res = true}
local TERMINAL = {S = true, F = true, C = true}

local function corrupt(id, reason) return refuse("CorruptJob", id, reason) end

-- Decimal digits only (what fmt writes), at most 15 of them (so within MAXINT), without number
-- parsing: tonumber is strtod, the dearest part of a check run on every field of every job.
local function not_integer(v)
  local n = #v
  return n > 16 or (n == 16 and string.byte(v) ~= 45) or not string.find(v, "^%-?%d+$")
end

-- A new job table, its defaults in place and room made for the fields a job usually has: a table
-- constructor sizes the table once for all its fields (nil ones too), where adding the fields one
-- by one would grow it five times, each time rehashing what it holds. This runs for every job a
-- script loads. DEFAULTS says the same; a stored field overwrites its default.
local function new_job_table()
  return {rv = "0", a = "0", f = "0", pd = "0", dp = "", ir = "inline", odf = "block", pr = "0",
    m = "3", q = "default", s = nil, st = nil, at = nil, sq = nil, p = nil, ins = nil, w = nil,
    x = nil, n = nil, att = nil, fin = nil, o = nil}
end

-- The checks every stored field gets (those holding their default are not stored, and good);
-- not_numeric: the first integer field that holds something else, found while loading.
-- Queue names found valid go to ctx.names_ok (a batch names the same few again and again).
local function check_job(ctx, id, h, not_numeric)
  if not_numeric then return corrupt(id, "field '" .. not_numeric .. "' is not an integer") end
  -- (the fields every job has: a script reads sq when it places a job in the ready index)
  local missing = (h.s == nil and "s") or (h.sq == nil and "sq")
  if missing then return corrupt(id, "field '" .. missing .. "' is missing") end
  local need = STATE_NEEDS[h.st]
  if need == nil then return corrupt(id, "field 'st' holds an unknown state") end
  if h[need] == nil then return corrupt(id, "field '" .. need .. "' is not an integer") end
  local q = h.q
  if q ~= nil and not ctx.names_ok[q] then
    if not valid_name(q, NAME_MAX) then return corrupt(id, "field 'q' is not a valid queue name") end
    ctx.names_ok[q] = true
  end
  if h.st == "L" and (h.w == nil or h.n == nil) then
    return corrupt(id, "a leased job lacks its worker or nonce")
  end
  return nil
end

-- The job as a table of its fields, or nil and a refusal (MissingJob, CorruptJob).
-- What the call keeps of each job it loads: ctx.loaded[id] its raw HGETALL reply and
-- ctx.changed[id] the changes tables moved into it since, in order (see job_reply);
-- ctx.implicit_ins[id] when its inserted_at is not stored (it equals its first available_at).
-- ctx.int_ok: strings this call found to be integers (made at the first job loaded): the times
-- in a batch's jobs are mostly the same few, and a pattern match costs more than a table lookup.
local function load_job(ctx, id)
  local k = key_job(ctx, id)
  local raw = pcall_typed("HGETALL", k)
  if raw.err then
    local kind = redis.call("TYPE", k)["ok"]
    return nil, corrupt(id, "key holds a " .. kind .. ", not a hash")
  end
  if #raw == 0 then return nil, refuse("MissingJob", id) end
  local h, not_numeric, ok = new_job_table(), nil, ctx.int_ok
  if ok == nil then
    ok = {}
    ctx.int_ok = ok
  end
  for i = 1, #raw, 2 do
    local f, v = raw[i], raw[i + 1]
    h[f] = v
    if NUMERIC[f] and not SMALL_NUM[v] and not ok[v] and not_numeric == nil then
      if not_integer(v) then not_numeric = f else ok[v] = true end
    end
  end
  local bad = check_job(ctx, id, h, not_numeric)
  if bad then return nil, bad end
  if h.ins == nil and h.at ~= nil then
    h.ins = h.at
    ctx.implicit_ins[id] = true
  end
  ctx.loaded[id], ctx.changed[id] = raw, nil
  return h
end

-- Refusal when a structure key exists with another type (someone wrote it by hand). Keys (and
-- queues, by name: no key name is a queue name) whose types this call has checked are kept in
-- ctx.checked.
local function check_types(ctx, keys, want)
  local checked = ctx.checked
  for _, k in ipairs(keys) do
    if not checked[k] then
      local kind = redis.call("TYPE", k)["ok"]
      if kind ~= "none" and kind ~= want then
        return refuse("CorruptKey", k, "holds a " .. kind .. ", expected a " .. want)
      end
      checked[k] = true
    end
  end
  return nil
end

local QUEUE_ZSETS = {"ready", "delayed", "delayed_pr", "retrying", "leased", "blocked",
  "succeeded", "failed", "cancelled", "expiring"}

-- Refusal when a key of the queue (or the namespace) has the wrong type; checked once per call.
local function check_queue(ctx, queue)
  if ctx.checked[queue] then return nil end
  local bad = nil
  local keys = {}
  for i, what in ipairs(QUEUE_ZSETS) do keys[i] = key_q(ctx, queue, what) end
  bad = check_types(ctx, keys, "zset") or check_types(ctx, {key_queues(ctx)}, "set")
    or check_types(ctx, {key_q(ctx, queue, "wake")}, "list")
    or (ctx.events and check_types(ctx, {ctx.events}, "stream")) or nil
  if bad == nil then ctx.checked[queue] = true end
  return bad
end

-- Refusal when a key a call is about to write has another type, for the calls that check only
-- the keys they write: the queue's sorted sets listed in `writes` (a constant list), its wake
-- list when writes.wake, the namespace's queue set and sequence when writes.namespace, and the
-- events. Once a call per queue and list (ctx.checked keeps both); a queue that passed
-- check_queue needs nothing more.
local function writes_error(ctx, queue, writes)
  local checked = ctx.checked
  local done = checked[writes]
  if done == nil then
    done = {}
    checked[writes] = done
  end
  if checked[queue] or done[queue] then return nil end
  local keys = {}
  for i, what in ipairs(writes) do keys[i] = key_q(ctx, queue, what) end
  local bad = check_types(ctx, keys, "zset")
    or (writes.wake and check_types(ctx, {key_q(ctx, queue, "wake")}, "list"))
    or (writes.namespace and (check_types(ctx, {key_queues(ctx)}, "set")
      or check_types(ctx, {key_seq(ctx)}, "string")))
    or (ctx.events and check_types(ctx, {ctx.events}, "stream")) or nil
  if bad == nil then done[queue] = true end
  return bad
end

-- Events and wake-ups ------------------------------------------------------------------------

-- Events are grouped: consecutive events of one kind and queue in one call become one stream
-- entry whose `job` and `a` fields list the jobs and their attempts, space-separated (ids hold
-- no whitespace), in order. One XADD per run (ctx.event_runs, made at the first) rather than
-- per job; a job's events keep their order.
local function emit(ctx, id, h, ev)
  if ctx.events then
    local runs = ctx.event_runs
    if runs == nil then
      runs = {}
      ctx.event_runs = runs
    end
    local last = runs[#runs]
    if last == nil or last.ev ~= ev or last.q ~= h.q then
      last = {ev = ev, q = h.q, jobs = {}, attempts = {}}
      runs[#runs + 1] = last
    end
    last.jobs[#last.jobs + 1] = id
    last.attempts[#last.attempts + 1] = h.a
  end
end

local function flush_events(ctx)
  for _, run in ipairs(ctx.event_runs or NONE) do
    local entries = fmt(ctx, math.max(1, math.floor(EVENTS_MAX / #run.jobs)))
    redis.call("XADD", ctx.events, "MAXLEN", "~", entries, "*", "job", table.concat(run.jobs, " "),
      "ev", run.ev, "q", run.q, "a", table.concat(run.attempts, " "))
  end
end

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
  local index = ctx.index
  if index == nil then return end -- nothing buffered
  for _, k in ipairs(ctx.index_keys) do
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
  ctx.index, ctx.index_keys = nil, nil
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

-- Queues that got claimable jobs during this call, and how many (ctx.woken, made at the first):
-- idle workers block on the queue's wake list; finish() pushes at most WAKE_MAX tokens per queue
-- once the call is done.
local function wake(ctx, queue)
  local woken = ctx.woken
  if woken == nil then
    ctx.woken = {[queue] = 1}
  else
    woken[queue] = (woken[queue] or 0) + 1
  end
end

-- A call that leaves cascade work replies {"More", reply}: the client carries the work on
-- (cascade.lua) before it hands the reply's result to its caller. Work is left when the cascade
-- this call started (its root: the call id) has some in Redis: this call left it, or, for a
-- re-sent call, the first delivery did and it is not done yet.
local function finish(ctx, reply)
  flush_index(ctx)
  flush_events(ctx)
  local cs = ctx.cascade
  if cs and not cs.step and (cs.deferred or (cs.resent
      and type(redis.pcall("ZSCORE", key_cascades(ctx), ctx.args[1])) == "string")) then
    reply = {"More", reply}
  end
  for queue, n in pairs(ctx.woken or NONE) do
    -- A paused queue's workers are not woken for it (its claims are refused): resume.lua
    -- pushes its tokens then. (Not a set: no pause of ours; pushed as before.)
    if pcall_typed("SISMEMBER", key_paused(ctx), queue) ~= 1 then
      local tokens = {}
      for i = 1, math.min(n, WAKE_MAX) do tokens[i] = "1" end
      local k = key_q(ctx, queue, "wake")
      if redis.call("RPUSH", k, unpack(tokens)) > WAKE_MAX then
        redis.call("LTRIM", k, WAKE_KEEP, "-1")
      end
    end
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

-- Flat reply for a job: {id, field, value, field, value, ...}; a later field overrides an
-- earlier one, fields holding their default may be absent, and blobs may come in chunks (the
-- client joins them). A job loaded in this call replies with its raw HGETALL reply and the
-- fields written since, which is cheaper than walking the table.
local function job_reply(ctx, id, h)
  local raw = ctx.loaded[id]
  local out = {id}
  if raw == nil then
    for f, v in pairs(h) do
      out[#out + 1] = f
      out[#out + 1] = v
    end
    return out
  end
  local n = #raw + 1
  for i = 1, #raw do out[i + 1] = raw[i] end
  for _, changes in ipairs(ctx.changed[id] or NONE) do
    for f, v in pairs(changes) do
      out[n + 1] = f
      out[n + 2] = v
      n = n + 2
    end
  end
  return out
end

-- HSET arguments for field f: a blob in chunks of CHUNK bytes, anything else as it is.
local function field_args(args, f, v)
  if BLOBS[f] and #v > CHUNK and #v <= CHUNK * BLOB_CHUNKS then
    args[#args + 1] = f
    args[#args + 1] = string.sub(v, 1, CHUNK)
    local i = 2
    for start = CHUNK + 1, #v, CHUNK do
      args[#args + 1] = f .. i
      args[#args + 1] = string.sub(v, start, start + CHUNK - 1)
      i = i + 1
    end
  else
    args[#args + 1] = f
    args[#args + 1] = v
  end
end

-- Indexes ------------------------------------------------------------------------------------
-- A W job sits in exactly one of: blocked (unmet dependencies, by available_at), delayed (not
-- yet due, by available_at) or ready (score priority, member "<available_at><seq><id>", so
-- that ties go by availability, then enqueue order). An R job sits in retrying (by
-- available_at) and in one of delayed / ready. L jobs sit in leased (by expires_at); finished
-- jobs in succeeded / failed / cancelled (by finished_at). Counts and pages by status are
-- derived from these (counts.lua, list.lua): no index holds every waiting job twice.
-- Every job in delayed is also in delayed_pr, as ready would hold it (score priority, the same
-- member): so a claim finds the best due jobs among many come due at once, priority by priority
-- (promote.lua's promote_best), where delayed gives them by due time alone.

-- Members sort by available_at, then sequence: both as fixed-width big-endian bytes (6 and 5:
-- available_at below 2^48 ms, sequence below 2^40), then the id. Binary rather than hex keeps a
-- member with a 16-character id within 32 bytes of memory (Redis compares members as bytes).
-- ctx.at_bytes (made at the first): the 6 bytes of each available_at met in this call (a batch
-- shares one or a few).
local READY_PREFIX = 11

local function ready_member(ctx, id, h)
  local floor = math.floor
  local at_bytes = ctx.at_bytes
  if at_bytes == nil then
    at_bytes = {}
    ctx.at_bytes = at_bytes
  end
  local prefix = at_bytes[h.at]
  if prefix == nil then
    local at = tonumber(h.at)
    prefix = string.char(floor(at / 1099511627776) % 256, floor(at / 4294967296) % 256,
      floor(at / 16777216) % 256, floor(at / 65536) % 256, floor(at / 256) % 256, at % 256)
    at_bytes[h.at] = prefix
  end
  local sq = num(h.sq)
  return prefix .. string.char(floor(sq / 4294967296) % 256, floor(sq / 16777216) % 256,
    floor(sq / 65536) % 256, floor(sq / 256) % 256, sq % 256) .. id
end

local function ready_id(member) return string.sub(member, READY_PREFIX + 1) end

local FINISHED = {S = "succeeded", F = "failed", C = "cancelled"}

-- Dependencies not yet succeeded (pd > 0); the usual "0" needs no number parsing.
local function blocked(h) return h.pd ~= "0" and num(h.pd) > 0 end

-- Events name the status a job enters (docs/lifecycle.md): a waiting job is blocked, available
-- or scheduled; every other state has one status.
local STATUS_OF = {R = "retryable", L = "executing", S = "completed", F = "discarded",
  C = "cancelled"}

local function status_name(h, now)
  if h.st ~= "W" then return STATUS_OF[h.st] end
  if blocked(h) then return "blocked" end
  return tonumber(h.at) <= now and "available" or "scheduled"
end

-- member: the job's entry in the ready index, when the caller took it from there (a claim by
-- queue): nothing else to remove.
local function unplace(ctx, id, h, member)
  local q = h.q
  if h.st == "W" or h.st == "R" then
    if h.st == "R" then zrem(ctx, key_q(ctx, q, "retrying"), id) end
    if blocked(h) then
      zrem(ctx, key_q(ctx, q, "blocked"), id)
    elseif member then
      zrem(ctx, key_q(ctx, q, "ready"), member)
    else
      member = ready_member(ctx, id, h)
      zrem(ctx, key_q(ctx, q, "ready"), member)
      zrem(ctx, key_q(ctx, q, "delayed"), id)
      zrem(ctx, key_q(ctx, q, "delayed_pr"), member)
    end
  elseif h.st == "L" then
    zrem(ctx, key_q(ctx, q, "leased"), id)
  else
    zrem(ctx, key_q(ctx, q, FINISHED[h.st]), id)
  end
end

-- Scores go as the stored decimal strings (checked integers): no number formatting.
local function place(ctx, id, h, now)
  local q = h.q
  if h.st == "W" or h.st == "R" then
    if h.st == "R" then zadd(ctx, key_q(ctx, q, "retrying"), h.at, id) end
    if blocked(h) then
      zadd(ctx, key_q(ctx, q, "blocked"), h.at, id)
    elseif tonumber(h.at) <= now then
      zadd(ctx, key_q(ctx, q, "ready"), h.pr, ready_member(ctx, id, h))
      wake(ctx, q)
    else
      zadd(ctx, key_q(ctx, q, "delayed"), h.at, id)
      zadd(ctx, key_q(ctx, q, "delayed_pr"), h.pr, ready_member(ctx, id, h))
    end
  elseif h.st == "L" then
    zadd(ctx, key_q(ctx, q, "leased"), h.x, id)
  else
    zadd(ctx, key_q(ctx, q, FINISHED[h.st]), h.fin, id)
  end
end

-- Moves a job to a new state: index out, fields written, index in, and an event when the
-- state changed or the job's last pending dependency succeeded.
local function move(ctx, id, h, now, changes, member)
  local before, held_back = h.st, h.pd ~= "0"
  unplace(ctx, id, h, member)
  -- HSET's arguments: room for the usual number of fields made at once (see new_job_table).
  local args, n = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}, 0
  for f, v in pairs(changes) do
    h[f] = v
    if BLOBS[f] then
      field_args(args, f, v)
      n = #args
    else
      args[n + 1] = f
      args[n + 2] = v
      n = n + 2
    end
  end
  -- What job_reply adds to the fields loaded: the changes tables themselves, in order.
  local changed_of = ctx.changed
  local changed = changed_of[id]
  if changed == nil then
    changed = {}
    changed_of[id] = changed
  end
  changed[#changed + 1] = changes
  if changes.at and ctx.implicit_ins[id] then -- available_at moves on: keep inserted_at
    args[n + 1] = "ins"
    args[n + 2] = h.ins
    ctx.implicit_ins[id] = nil
    changed[#changed + 1] = {ins = h.ins}
  end
  redis.call("HSET", key_job(ctx, id), unpack(args))
  place(ctx, id, h, now)
  if h.st ~= before or (held_back and not blocked(h)) then
    emit(ctx, id, h, status_name(h, now))
  end
end

-- Lease tokens -------------------------------------------------------------------------------

local function token_reply(id, h)
  return {id, h.rv, h.w, h.f, h.x, h.n}
end

-- The lease check of docs/lifecycle.md (lease_error), with the claim nonce checked beside the
-- fence. t = {job_id, input_revision, worker_id, fence, expires_at, nonce}; worker = caller's id.
local function lease_error(id, h, t, worker, now)
  if worker ~= t[3] or id ~= t[1] or h.rv ~= t[2] then return refuse("StaleLease") end
  if h.st ~= "L" or h.w ~= t[3] or h.f ~= t[4] or h.n ~= t[6] or h.x ~= t[5] then
    return refuse("StaleLease")
  end
  if now >= tonumber(h.x) then return refuse("LeaseExpired", h.x) end
  return nil
end

-- The lease token of a claim as its call record keeps it: "fence expires_at nonce".
local function token_record(h)
  return h.f .. " " .. h.x .. " " .. h.n
end

-- A claim reply rebuilt from a call record: the token the first delivery handed out (its fence,
-- expires_at and nonce as the record keeps them).
local function replayed_claim(ctx, id, h, worker, fence, expires_at, nonce)
  return {"Claim", job_reply(ctx, id, h), {id, h.rv, worker, fence, expires_at, nonce}}
end

-- The write of a claim, once its checks passed (claim_job.lua, claim.lua): attempt + 1,
-- fence + 1, Leased until now + lease_ms with a new nonce. A job still blocked whose dependencies
-- all succeeded (claim_job found them so: a cascade has not reached it yet) has none pending.
local function lease(ctx, id, h, worker, lease_ms, now, nonce, member)
  local fence = num(h.f) + 1
  move(ctx, id, h, now, {
    st = "L", a = fmt(ctx, num(h.a) + 1), f = fmt(ctx, fence), w = worker,
    x = fmt(ctx, now + lease_ms), n = nonce, att = fmt(ctx, now),
    pd = blocked(h) and "0" or nil,
  }, member)
end

-- Dependencies -------------------------------------------------------------------------------

-- docs/lifecycle.md's dependency_error over a job's dependency list: the first dependency not
-- succeeded.
local function dependency_error(ctx, h)
  for _, dep in ipairs(split(h.dp or "")) do
    local d, err = load_job(ctx, dep)
    if d == nil then
      if err[1] == "MissingJob" then return refuse("MissingDependency", dep) end
      return err
    end
    if d.st ~= "S" then return refuse("IncompleteDependency", dep) end
  end
  return nil
end

-- Cascades -----------------------------------------------------------------------------------
-- When a job is cancelled, fails or succeeds, its dependents are visited: a cancelled job's live
-- dependents are cancelled (and theirs, transitively), so are a failed job's dependents that
-- asked for it, and a succeeded job's waiting dependents count one pending dependency less
-- (released at none). A call visits at most CASCADE.step dependents in all, so that no call holds
-- Redis long whatever the tree: a parent whose dependents do not fit in the room left is left as
-- cascade work under the call's root (its call id):
--   cascades                 zset: roots with work left, by when their caller last carried it on
--   cascade:<root>           list: the root's items, "<kind> <parent id>" (kind: c cancelled,
--                            f failed, s succeeded)
--   cascade:<root> <parent>  set: the parent's dependents still to visit (its dependents set,
--                            renamed: a dependent enqueued since is not visited, as it was not
--                            there when the parent moved)
-- and the parent's hash counts its items left in `cw`. The call replies {"More", reply}
-- (finish); cascade.lua carries the work on, step by step: the caller's client at once, and a
-- worker's maintenance once a root has been idle for CASCADE.idle_ms (its caller went away).
-- Until the cascade reaches a dependent, the dependent stays blocked (it still counts the parent
-- among its pending dependencies): nothing runs early, and get names the parent it waits on.
-- CASCADE.step: the dependents a call visits at most; idle_ms: how long a root waits for its
-- caller before a worker's maintenance takes it up; reason: what a cancelled dependent says;
-- none: the plan of a parent with no dependents.
local CASCADE = {step = 50, idle_ms = 5000, reason = {c = " was cancelled", f = " failed"},
  none = {visits = NONE, inline = NONE, deferred = NONE}}

-- The call's cascade state, ctx.cascade (made at the first parent with dependents: most calls
-- never need it): the room left, the root, the ids this call cancelled, whether it left work;
-- a step of cascade.lua (step) lists the damaged dependents it skipped (damaged).
local function cascade_state(ctx)
  local cs = ctx.cascade
  if cs == nil or cs.room == nil then
    cs = {room = CASCADE.step, root = ctx.args[1], cancelled = {}, deferred = false,
      resent = cs ~= nil and cs.resent, step = false, damaged = nil}
    ctx.cascade = cs
  end
  return cs
end

-- What visiting dependent dh of parent pid (ph: its hash, nil when gone) does for an item of
-- `kind`: "C" and the reason, "R" (one pending dependency less), or nil. A failed parent retried
-- and succeeded while its item waited releases the dependents that did not ask to be cancelled.
local function visit_action(kind, pid, ph, dh)
  if TERMINAL[dh.st] then return nil end
  if kind == "c" or (kind == "f" and dh.odf == "cancel") then
    return "C", "dependency " .. pid .. CASCADE.reason[kind]
  end
  if (kind == "s" or (ph and ph.st == "S")) and (dh.st == "W" or dh.st == "R") and blocked(dh) then
    return "R"
  end
  return nil
end

-- The jobs of ids as {id, h}: a missing one is skipped (pruned); a damaged one refuses the call
-- (nil and the refusal) or, in a step of cascade.lua, is listed in cs.damaged and skipped.
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
      local did, dh = d[1], d[2]
      local action, reason = visit_action(item[1], item[2], item[3], dh)
      if action == "R" then
        plan.visits[#plan.visits + 1] = {did, dh, "R"}
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

-- Writes a plan, once the parent has moved: each visit; the dependents sets of the cancelled
-- parents whose dependents were all visited go (they can never run); the deferred parents are
-- left as work (their dependents sets renamed less those visited, which a failed or succeeded
-- parent keeps in a new one; their items listed; the root registered).
local function apply_cascade(ctx, plan, now)
  local cs = ctx.cascade
  for _, v in ipairs(plan.visits) do
    local did, dh = v[1], v[2]
    if v[3] == "C" then
      move(ctx, did, dh, now, {st = "C", cr = v[4], fin = fmt(ctx, now)})
      cs.cancelled[#cs.cancelled + 1] = did
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
end

-- Moves a job by `changes`; when that enters Failed, also cancels the dependents that asked for
-- it (and theirs); the rest stay blocked, visibly. Everything the call visits is checked (loaded)
-- before the first write; a refusal or nil.
local function move_or_fail(ctx, id, h, now, changes)
  local plan = CASCADE.none
  if changes.st == "F" then
    local err
    plan, err = plan_cascade(ctx, "f", id, h)
    if plan == nil then return err end
  end
  move(ctx, id, h, now, changes)
  apply_cascade(ctx, plan, now)
  return nil
end

-- docs/lifecycle.md's retry_or_fail: the changes to apply (fail.lua, expire.lua).
local function retry_or_fail(ctx, h, kind, reason, now, delay)
  if num(h.a) < num(h.m) then
    return {st = "R", at = fmt(ctx, now + delay), ek = kind, em = reason}
  end
  return {st = "F", fin = fmt(ctx, now), ek = kind, em = reason}
end

-- The failure history of a job (docs/lifecycle.md, "Failure history"): its last 5 failed
-- attempts, newest first, in the list KEYS[1].."errors:"..id (type-checked by each caller before
-- its first write), each "<attempt> <at> <kind> <length of message>:<message><traceback>".
-- Prune deletes it with the job.
local function key_errors(ctx, id) return ctx.prefix .. "errors:" .. id end

-- Keeps the failed attempt of job `id` (its attempt h.a, at now) in its history.
local function keep_error(ctx, id, h, kind, reason, trace, now)
  local kept, k = 5, key_errors(ctx, id)
  local entry = h.a .. " " .. fmt(ctx, now) .. " " .. kind .. " " .. #reason .. ":" .. reason
  if redis.call("LPUSH", k, entry .. trace) > kept then
    redis.call("LTRIM", k, "0", fmt(ctx, kept - 1))
  end
end

-- Refusal for kind / reason arguments of fail-like calls.
local function error_text_error(kind, reason)
  if not valid_name(kind, NAME_MAX) then
    return invalid("error kind must be 1-" .. NAME_MAX .. " characters of letters, digits, '_', '.', '-'")
  end
  return text_error(reason, "reason")
end

-- Openings and replies -------------------------------------------------------------------------

-- The opening of the lease holder's calls (complete, fail, permanent_fail, release, heartbeat):
-- ARGV[2] now, ARGV[3..8] the token (job_id, input_revision, worker_id, fence, expires_at,
-- nonce), ARGV[9] the caller's worker id. Returns the held job c = {now, id, h, t, worker,
-- record} (record: this call's record when it is a re-sent one), or nil and a refusal.
local function open_lease(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return nil, e end
  local t = {args[3], args[4], args[5], args[6], args[7], args[8]}
  local h, err = load_job(ctx, t[1])
  if h == nil then return nil, err end
  return {now = now, id = t[1], h = h, t = t, worker = args[9], record = recorded(ctx)}
end

local function job_applied(ctx, c, now_text)
  return applied("JobApplied", now_text, job_reply(ctx, c.id, c.h))
end

-- The body of complete.lua / fail.lua / permanent_fail.lua / release.lua: the lease opened, a
-- re-sent call answered from its record, else `edge` (the script's own: a refusal, or nil once
-- the job has moved) with the script's arguments (up to four), then the record.
local function lease_outcome(ctx, edge, a, b, k, d)
  local c, err = open_lease(ctx)
  if c == nil then return err end
  if c.record then return job_applied(ctx, c, "") end
  local bad = edge(ctx, c, a, b, k, d)
  if bad then return bad end
  record(ctx, "A")
  return job_applied(ctx, c, fmt(ctx, c.now))
end

-- The opening of expire / cancel / retry: ARGV[2] now, ARGV[3] job id, ARGV[4] the fence the
-- caller observed ("" = the current one, cancel and retry only). Returns the job c = {now, id,
-- h, record}, or nil and a refusal (FenceChanged included).
local function open_fenced(ctx, allow_any)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return nil, e end
  local bad = id_error(args[3], "job_id")
  if bad then return nil, bad end
  local h, err = load_job(ctx, args[3])
  if h == nil then return nil, err end
  local c = {now = now, id = args[3], h = h}
  c.record = recorded(ctx)
  if c.record then return c end
  local fence = args[4]
  if fence == "" and allow_any then return c end
  if int(fence) == nil then return nil, invalid("expected_fence must be an integer") end
  if tonumber(fence) ~= tonumber(h.f) then return nil, refuse("FenceChanged") end
  return c
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
  }
  return finish(ctx, main(ctx))
end
