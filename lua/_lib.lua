-- _lib.lua: helpers shared by every script, prepended at load time (no include language).
--
-- Conventions
--   KEYS[1]  the namespace key prefix, e.g. "quasar:{orders}:". Every key a script touches is
--            KEYS[1] .. suffix, so every key keeps the namespace hash tag (one cluster slot).
--   KEYS[2]  optional: the namespace's event stream (KEYS[1] .. "events"). When given, every state
--            change appends {job, ev, q, a} to it (capped near EVENTS_MAX job changes).
--   ARGV[1]  call id: random, made by the client per call; a re-sent call carries the same one.
--   ARGV[2]  "now" in integer milliseconds, or "" for the Redis server clock (the default).
--   Integers travel as decimal strings and are formatted back with "%d" (never tostring, which
--   turns large numbers into floats).
--   Replies are arrays whose first element is a readable tag; refusals come from refuse(), applied
--   replies from applied(). Python decodes both through one vocabulary (quasar_redis/_protocol.py).
--   A script checks everything before its first write: Redis has no rollback. Calls made of many
--   transitions (a claim of many jobs, a report, an enqueue in "each" mode) check each one before
--   its own first write: a refused one is skipped whole, never half-written.
--
-- Job hash fields (a hash at P.."job:"..id; the id is the key suffix):
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
-- Re-sent calls: every applied transition writes a call record P.."call:"..cid (a short string,
-- CALL_TTL_MS); a call whose record exists is a re-sent one and gets the first delivery's outcome
-- again (the same tag, the same lease token; the job as it is now), changing nothing. Refusals
-- write nothing, so a re-sent refused call is simply evaluated again.

-- The call's namespace prefix, event stream and arguments: set by run_call() as each call starts.
local P, EVENTS, KEY_QUEUES, KEY_SEQ, ARGS
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

local function key_job(id) return P .. "job:" .. id end
local function key_dependents(id) return P .. "dependents:" .. id end
local function key_call(cid) return P .. "call:" .. cid end
-- Queue keys are built once per script run (a claim or report names the same few per job).
local KEY_Q = {}
local function key_q(queue, what)
  local keys = KEY_Q[queue]
  if keys == nil then
    keys = {}
    KEY_Q[queue] = keys
  end
  local k = keys[what]
  if k == nil then
    k = P .. "q:" .. queue .. ":" .. what
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

-- Other integers formatted in this call (a batch formats the same now, the same expiry, ...).
local TEXT_OF = {}

local function fmt(n)
  local text = SMALL_TEXT[n] or TEXT_OF[n]
  if text == nil then
    text = string.format("%d", n)
    TEXT_OF[n] = text
  end
  return text
end

-- The number in a stored integer field (checked when the job was loaded).
local function num(s) return SMALL_NUM[s] or tonumber(s) end

-- The record of an applied call (see "Re-sent calls" above), or nil. A key of another type is
-- no record of ours: it is ignored here and never overwritten.
local function recorded(cid)
  local value = redis.pcall("GET", key_call(cid))
  if type(value) ~= "string" then return nil end
  return value
end

local function record(cid, value)
  redis.call("SET", key_call(cid), value, "PX", CALL_TTL_TEXT, "NX")
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

local function id_error(s, what)
  if #s > ID_MAX then return invalid(what .. " must be at most " .. ID_MAX .. " bytes") end
  if string.find(s, "[%c%s]") then
    return invalid(what .. " must not contain whitespace or control characters")
  end
  return nil
end

-- The ready index keeps available_at in 11 hex digits: times stay below 16^11 ms (year 2527).
local MAX_TIME = 17592186044415

local function time_error(at, what)
  if at > MAX_TIME then
    return invalid(what .. " must be before " .. fmt(MAX_TIME) .. " (ms since the epoch, year 2527)")
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
-- Jobs whose inserted_at is not stored because it equals their first available_at.
local IMPLICIT_INS = {}
-- Per job loaded: the raw HGETALL reply, and the changes tables moved into it since, in order (see
-- job_reply).
local RAW, CHANGED = {}, {}
local NONE = {} -- an empty list, never written to
local CHUNK = 64
local BLOB_CHUNKS = 16
local BLOBS = {p = true, res = true}
local TERMINAL = {S = true, F = true, C = true}

local function corrupt(id, reason) return refuse("CorruptJob", id, reason) end

-- Strings this call found to be integers (made at the first job loaded): the times in a batch's
-- jobs are mostly the same few, and a pattern match costs more than a table lookup.
local INT_OK

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

-- Queue names found valid in this call (a batch names the same few again and again).
local NAMES_OK = {}

-- The checks every stored field gets (those holding their default are not stored, and good);
-- not_numeric: the first integer field that holds something else, found while loading.
local function check_job(id, h, not_numeric)
  if not_numeric then return corrupt(id, "field '" .. not_numeric .. "' is not an integer") end
  if h.s == nil then return corrupt(id, "field 's' is missing") end
  local need = STATE_NEEDS[h.st]
  if need == nil then return corrupt(id, "field 'st' holds an unknown state") end
  if h[need] == nil then return corrupt(id, "field '" .. need .. "' is not an integer") end
  local q = h.q
  if q ~= nil and not NAMES_OK[q] then
    if not valid_name(q, NAME_MAX) then return corrupt(id, "field 'q' is not a valid queue name") end
    NAMES_OK[q] = true
  end
  if h.st == "L" and (h.w == nil or h.n == nil) then
    return corrupt(id, "a leased job lacks its worker or nonce")
  end
  return nil
end

-- The job as a table of its fields, or nil and a refusal (MissingJob, CorruptJob).
local function load_job(id)
  local k = key_job(id)
  local raw = redis.pcall("HGETALL", k)
  if raw.err then
    local kind = redis.call("TYPE", k)["ok"]
    return nil, corrupt(id, "key holds a " .. kind .. ", not a hash")
  end
  if #raw == 0 then return nil, refuse("MissingJob", id) end
  local h, not_numeric, ok = new_job_table(), nil, INT_OK
  if ok == nil then
    ok = {}
    INT_OK = ok
  end
  for i = 1, #raw, 2 do
    local f, v = raw[i], raw[i + 1]
    h[f] = v
    if NUMERIC[f] and not SMALL_NUM[v] and not ok[v] and not_numeric == nil then
      if not_integer(v) then not_numeric = f else ok[v] = true end
    end
  end
  local bad = check_job(id, h, not_numeric)
  if bad then return nil, bad end
  if h.ins == nil and h.at ~= nil then
    h.ins = h.at
    IMPLICIT_INS[id] = true
  end
  RAW[id], CHANGED[id] = raw, nil
  return h
end

-- Keys (and queues, by name: no key name is a queue name) whose types this call has checked.
local CHECKED = {}

-- Refusal when a structure key exists with another type (someone wrote it by hand).
local function check_types(keys, want)
  for _, k in ipairs(keys) do
    if not CHECKED[k] then
      local kind = redis.call("TYPE", k)["ok"]
      if kind ~= "none" and kind ~= want then
        return refuse("CorruptKey", k, "holds a " .. kind .. ", expected a " .. want)
      end
      CHECKED[k] = true
    end
  end
  return nil
end

local QUEUE_ZSETS = {"ready", "delayed", "retrying", "leased", "blocked",
  "succeeded", "failed", "cancelled"}

-- Refusal when a key of the queue (or the namespace) has the wrong type; checked once per call.
local function check_queue(queue)
  if CHECKED[queue] then return nil end
  local bad = nil
  local keys = {}
  for i, what in ipairs(QUEUE_ZSETS) do keys[i] = key_q(queue, what) end
  bad = check_types(keys, "zset") or check_types({KEY_QUEUES}, "set")
    or check_types({key_q(queue, "wake")}, "list")
    or (EVENTS and check_types({EVENTS}, "stream")) or nil
  if bad == nil then CHECKED[queue] = true end
  return bad
end

-- Refusal when a key a call is about to write has another type, for the calls that check only
-- the keys they write: the queue's sorted sets listed in `writes` (a constant list), its wake
-- list when writes.wake, the namespace's queue set and sequence when writes.namespace, and the
-- events. Once a call per queue and list (CHECKED keeps both); a queue that passed check_queue
-- needs nothing more.
local function writes_error(queue, writes)
  local done = CHECKED[writes]
  if done == nil then
    done = {}
    CHECKED[writes] = done
  end
  if CHECKED[queue] or done[queue] then return nil end
  local keys = {}
  for i, what in ipairs(writes) do keys[i] = key_q(queue, what) end
  local bad = check_types(keys, "zset")
    or (writes.wake and check_types({key_q(queue, "wake")}, "list"))
    or (writes.namespace and (check_types({KEY_QUEUES}, "set") or check_types({KEY_SEQ}, "string")))
    or (EVENTS and check_types({EVENTS}, "stream")) or nil
  if bad == nil then done[queue] = true end
  return bad
end

-- Events and wake-ups ------------------------------------------------------------------------

local EVENT_OF = {W = "released", R = "retrying", L = "active", S = "completed", F = "failed",
  C = "cancelled"}

-- Events are grouped: consecutive events of one kind and queue in one script become one stream
-- entry whose `job` and `a` fields list the jobs and their attempts, space-separated (ids hold
-- no whitespace), in order. One XADD per run rather than per job; a job's events keep their order.
local EVENT_RUNS = {}

local function emit(id, h, ev)
  if EVENTS then
    local last = EVENT_RUNS[#EVENT_RUNS]
    if last == nil or last.ev ~= ev or last.q ~= h.q then
      last = {ev = ev, q = h.q, jobs = {}, attempts = {}}
      EVENT_RUNS[#EVENT_RUNS + 1] = last
    end
    last.jobs[#last.jobs + 1] = id
    last.attempts[#last.attempts + 1] = h.a
  end
end

local function flush_events()
  for _, run in ipairs(EVENT_RUNS) do
    local entries = fmt(math.max(1, math.floor(EVENTS_MAX / #run.jobs)))
    redis.call("XADD", EVENTS, "MAXLEN", "~", entries, "*", "job", table.concat(run.jobs, " "),
      "ev", run.ev, "q", run.q, "a", table.concat(run.attempts, " "))
  end
end

-- Sorted-set writes are buffered: per key, the last write of each member (its score, or false
-- for a removal), applied as one ZREM and one ZADD per key by flush_index(), which runs before
-- a script reads a sorted set (zread) and when it is done (finish). The last write of a member
-- decides where it ends, as it would have written one by one.
local INDEX, INDEX_KEYS = {}, {}
local INDEX_CHUNK = 1000 -- members per command: unpack() has a limit

local function index_write(k, member, score)
  local m = INDEX[k]
  if m == nil then
    m = {}
    INDEX[k] = m
    INDEX_KEYS[#INDEX_KEYS + 1] = k
  end
  m[member] = score
end

-- score: an integer as a decimal string (never a Lua number: no float formatting on the way).
local function zadd(k, score, member) index_write(k, member, score) end
local function zrem(k, member) index_write(k, member, false) end

local function flush_args(cmd, k, args)
  for i = 1, #args, INDEX_CHUNK do
    redis.call(cmd, k, unpack(args, i, math.min(#args, i + INDEX_CHUNK - 1)))
  end
end

local function flush_index()
  if INDEX_KEYS[1] == nil then return end -- nothing buffered (no new tables either)
  for _, k in ipairs(INDEX_KEYS) do
    local removed, added = {}, {}
    for member, score in pairs(INDEX[k]) do
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
  INDEX, INDEX_KEYS = {}, {}
end

-- A read of a sorted set, after the buffered writes.
local function zread(...)
  flush_index()
  return redis.call(...)
end

-- zread of a key whose type the call has not checked: a key of another type is a refusal
-- (nil, CorruptKey), as check_types words it, never a script error.
local function zread_typed(cmd, k, ...)
  flush_index()
  local reply = redis.pcall(cmd, k, ...)
  if reply.err then
    local kind = redis.call("TYPE", k)["ok"]
    if kind == "zset" or kind == "none" then error(reply.err) end
    return nil, refuse("CorruptKey", k, "holds a " .. kind .. ", expected a zset")
  end
  return reply
end

-- Queues that got claimable jobs during this script, and how many: idle workers block on the
-- queue's wake list; finish() pushes at most WAKE_MAX tokens per queue once the script is done.
local WOKEN = {}

local function wake(queue)
  WOKEN[queue] = (WOKEN[queue] or 0) + 1
end

local function finish(reply)
  flush_index()
  flush_events()
  if next(WOKEN) == nil then return reply end
  for queue, n in pairs(WOKEN) do
    local tokens = {}
    for i = 1, math.min(n, WAKE_MAX) do tokens[i] = "1" end
    local k = key_q(queue, "wake")
    if redis.call("RPUSH", k, unpack(tokens)) > WAKE_MAX then
      redis.call("LTRIM", k, WAKE_KEEP, "-1")
    end
  end
  WOKEN = {}
  return reply
end

-- The opening of sweep / promote: now, and a limit of 1..10000, or nil and a refusal.
local function maintenance_args()
  local now, e = clock(ARGS[2])
  if now == nil then return nil, e end
  local limit = int(ARGS[3])
  if limit == nil or limit < 1 or limit > 10000 then
    return nil, invalid("limit must be between 1 and 10000")
  end
  local bad = check_types({KEY_QUEUES}, "set")
  if bad then return nil, bad end
  return now, limit
end

-- Calls fn(queue, room) for every sound queue of the namespace while done() < limit.
local function each_queue(limit, done, fn)
  for _, queue in ipairs(redis.call("SMEMBERS", KEY_QUEUES)) do
    if done() >= limit then break end
    if valid_name(queue, NAME_MAX) and check_queue(queue) == nil then fn(queue, limit - done()) end
  end
end

-- Flat reply for a job: {id, field, value, field, value, ...}; a later field overrides an
-- earlier one, fields holding their default may be absent, and blobs may come in chunks (the
-- client joins them). A job loaded in this script replies with its raw HGETALL reply and the
-- fields written since, which is cheaper than walking the table.
local function job_reply(id, h)
  local raw = RAW[id]
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
  for _, changes in ipairs(CHANGED[id] or NONE) do
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

-- Members sort by available_at, then sequence: both as fixed-width big-endian bytes (6 and 5:
-- available_at below 2^48 ms, sequence below 2^40), then the id. Binary rather than hex keeps a
-- member with a 16-character id within 32 bytes of memory (Redis compares members as bytes).
local READY_PREFIX = 11
-- The 6 bytes of each available_at met in this call (a batch shares one or a few).
local AT_BYTES = {}

local function ready_member(id, h)
  local floor = math.floor
  local prefix = AT_BYTES[h.at]
  if prefix == nil then
    local at = tonumber(h.at)
    prefix = string.char(floor(at / 1099511627776) % 256, floor(at / 4294967296) % 256,
      floor(at / 16777216) % 256, floor(at / 65536) % 256, floor(at / 256) % 256, at % 256)
    AT_BYTES[h.at] = prefix
  end
  local sq = num(h.sq)
  return prefix .. string.char(floor(sq / 4294967296) % 256, floor(sq / 16777216) % 256,
    floor(sq / 65536) % 256, floor(sq / 256) % 256, sq % 256) .. id
end

local function ready_id(member) return string.sub(member, READY_PREFIX + 1) end

local FINISHED = {S = "succeeded", F = "failed", C = "cancelled"}

-- Dependencies not yet succeeded (pd > 0); the usual "0" needs no number parsing.
local function blocked(h) return h.pd ~= "0" and num(h.pd) > 0 end

-- member: the job's entry in the ready index, when the caller took it from there (a claim by
-- queue): nothing else to remove.
local function unplace(id, h, member)
  local q = h.q
  if h.st == "W" or h.st == "R" then
    if h.st == "R" then zrem(key_q(q, "retrying"), id) end
    if blocked(h) then
      zrem(key_q(q, "blocked"), id)
    else
      zrem(key_q(q, "ready"), member or ready_member(id, h))
      if not member then zrem(key_q(q, "delayed"), id) end
    end
  elseif h.st == "L" then
    zrem(key_q(q, "leased"), id)
  else
    zrem(key_q(q, FINISHED[h.st]), id)
  end
end

-- Scores go as the stored decimal strings (checked integers): no number formatting.
local function place(id, h, now)
  local q = h.q
  if h.st == "W" or h.st == "R" then
    if h.st == "R" then zadd(key_q(q, "retrying"), h.at, id) end
    if blocked(h) then
      zadd(key_q(q, "blocked"), h.at, id)
    elseif tonumber(h.at) <= now then
      zadd(key_q(q, "ready"), h.pr, ready_member(id, h))
      wake(q)
    else
      zadd(key_q(q, "delayed"), h.at, id)
    end
  elseif h.st == "L" then
    zadd(key_q(q, "leased"), h.x, id)
  else
    zadd(key_q(q, FINISHED[h.st]), h.fin, id)
  end
end

-- Moves a job to a new state: index out, fields written, index in, and an event when the
-- state changed.
local function move(id, h, now, changes, member)
  local before = h.st
  unplace(id, h, member)
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
  local changed = CHANGED[id]
  if changed == nil then
    changed = {}
    CHANGED[id] = changed
  end
  changed[#changed + 1] = changes
  if changes.at and IMPLICIT_INS[id] then -- available_at moves on: keep inserted_at
    args[n + 1] = "ins"
    args[n + 2] = h.ins
    IMPLICIT_INS[id] = nil
    changed[#changed + 1] = {ins = h.ins}
  end
  redis.call("HSET", key_job(id), unpack(args))
  place(id, h, now)
  if h.st ~= before then emit(id, h, EVENT_OF[h.st]) end
end

-- Lease tokens -------------------------------------------------------------------------------

local function token_reply(id, h)
  return {id, h.rv, h.w, h.f, h.x, h.n}
end

-- The seed's lease_error, with the claim nonce checked beside the fence.
-- t = {job_id, input_revision, worker_id, fence, expires_at, nonce}; worker = caller's id.
local function lease_error(id, h, t, worker, now)
  if worker ~= t[3] or id ~= t[1] or h.rv ~= t[2] then return refuse("StaleLease") end
  if h.st ~= "L" or h.w ~= t[3] or h.f ~= t[4] or h.n ~= t[6] or h.x ~= t[5] then
    return refuse("StaleLease")
  end
  if now >= tonumber(h.x) then return refuse("LeaseExpired", h.x) end
  return nil
end

-- Reads the token arguments starting at ARGV[i]: job_id, input_revision, worker_id, fence,
-- expires_at, nonce; then the caller's worker id.
local function token_args(i)
  return {ARGS[i], ARGS[i + 1], ARGS[i + 2], ARGS[i + 3], ARGS[i + 4], ARGS[i + 5]}, ARGS[i + 6]
end

-- Dependencies -------------------------------------------------------------------------------

-- The seed's dependency_error over a job's dependency list: first dependency not succeeded.
local function dependency_error(h)
  for _, dep in ipairs(split(h.dp or "")) do
    local d, err = load_job(dep)
    if d == nil then
      if err[1] == "MissingJob" then return refuse("MissingDependency", dep) end
      return err
    end
    if d.st ~= "S" then return refuse("IncompleteDependency", dep) end
  end
  return nil
end

-- Loads every job in ids; on the first missing or damaged one returns nil and a refusal.
-- Missing dependents are skipped (they were pruned), so nil never means "missing" here.
local function load_all(ids)
  if ids[1] == nil then return NONE end -- (no table made for the usual job with no dependents)
  local out = {}
  for _, id in ipairs(ids) do
    local h, err = load_job(id)
    if h then
      out[#out + 1] = {id, h}
    elseif err[1] ~= "MissingJob" then
      return nil, err
    end
  end
  return out
end

-- The closure of jobs a cancellation of `root` reaches (dependents of cancelled jobs can never
-- run). Returns a list of {id, h, reason} in cascade order, or nil and a refusal; checks all first.
local function dependents_of(id, h)
  if not h.hd then return NONE end
  return redis.call("SMEMBERS", key_dependents(id))
end

local function cancel_closure(root_id, root_h, only_policy_cancel)
  local out, seen = {}, {[root_id] = true}
  local frontier = {{root_id, root_h, only_policy_cancel}}
  while #frontier > 0 do
    local item = table.remove(frontier, 1)
    local parent, policy_only = item[1], item[3]
    local deps, err = load_all(dependents_of(parent, item[2]))
    if deps == nil then return nil, err end
    for _, d in ipairs(deps) do
      local id, h = d[1], d[2]
      if not seen[id] and not TERMINAL[h.st] and (not policy_only or h.odf == "cancel") then
        seen[id] = true
        local why = policy_only and " failed" or " was cancelled"
        out[#out + 1] = {id, h, "dependency " .. parent .. why}
        frontier[#frontier + 1] = {id, h, false}
      end
    end
  end
  return out
end

local function forget_dependents(id, h)
  if h.hd then redis.call("DEL", key_dependents(id)) end
end

local function apply_cancel_closure(list, now)
  for _, item in ipairs(list) do
    local id, h, reason = item[1], item[2], item[3]
    move(id, h, now, {st = "C", cr = reason, fin = fmt(now)})
    forget_dependents(id, h)
  end
end

-- Jobs whose last dependency just succeeded: checked first, then released by release_dependents.
local function load_dependents(id, h)
  return load_all(dependents_of(id, h))
end

-- The dependents set is kept: a dependent still blocked on another job lists this one among
-- its dependencies, so prune must know this job is still needed (prune.lua).
local function release_dependents(list, now)
  for _, item in ipairs(list) do
    local did, dh = item[1], item[2]
    if (dh.st == "W" or dh.st == "R") and blocked(dh) then
      move(did, dh, now, {pd = fmt(num(dh.pd) - 1)})
    end
  end
end

-- What a job entering Failed does to its dependents: those that asked to be cancelled are
-- cancelled (and their own dependents with them); the rest stay blocked, visibly.
local function failure_closure(id, h)
  return cancel_closure(id, h, true)
end

-- Moves a job by `changes`; when that enters Failed, also cancels the dependents that asked for
-- it. Everything is checked (the dependents loaded) before the first write; a refusal or nil.
local function move_or_fail(id, h, now, changes)
  local closure = {}
  if changes.st == "F" then
    local err
    closure, err = failure_closure(id, h)
    if closure == nil then return err end
  end
  move(id, h, now, changes)
  apply_cancel_closure(closure, now)
  return nil
end

-- The seed's retry_or_fail: the changes to apply.
local function retry_or_fail(h, kind, reason, now, delay)
  if num(h.a) < num(h.m) then
    return {st = "R", at = fmt(now + delay), ek = kind, em = reason}
  end
  return {st = "F", fin = fmt(now), ek = kind, em = reason}
end

-- Refusal for kind / reason arguments of fail-like calls.
local function error_text_error(kind, reason)
  if not valid_name(kind, NAME_MAX) then
    return invalid("error kind must be 1-" .. NAME_MAX .. " characters of letters, digits, '_', '.', '-'")
  end
  return text_error(reason, "reason")
end

-- Shared edges ---------------------------------------------------------------------------------

-- The lease token of a claim as its call record keeps it: "fence expires_at nonce".
local function token_record(h)
  return h.f .. " " .. h.x .. " " .. h.n
end

-- A claim reply rebuilt from a call record: the token the first delivery handed out (its fence,
-- expires_at and nonce as the record keeps them).
local function replayed_claim(id, h, worker, fence, expires_at, nonce)
  return {"Claim", job_reply(id, h), {id, h.rv, worker, fence, expires_at, nonce}}
end

-- The seed's claim_ready after its checks passed: attempt+1, fence+1, Leased.
local function lease(id, h, worker, lease_ms, now, nonce, member)
  local fence = num(h.f) + 1
  move(id, h, now, {
    st = "L", a = fmt(num(h.a) + 1), f = fmt(fence), w = worker, x = fmt(now + lease_ms),
    n = nonce, att = fmt(now),
  }, member)
end

local PROMOTE_WRITES = {"delayed", "ready", wake = true}

-- Moves due jobs of a queue from delayed to ready, at most `limit`. Returns how many, and the
-- refusal that stopped it before any write (a key of the wrong type).
local function promote_queue(queue, now, limit)
  local ids, bad = zread_typed("ZRANGEBYSCORE", key_q(queue, "delayed"), "-inf", fmt(now),
    "LIMIT", "0", fmt(limit))
  if ids == nil then return 0, bad end
  if ids[1] ~= nil then
    bad = writes_error(queue, PROMOTE_WRITES)
    if bad then return 0, bad end
  end
  local moved = 0
  for _, id in ipairs(ids) do
    local h = load_job(id)
    zrem(key_q(queue, "delayed"), id)
    if h and (h.st == "W" or h.st == "R") and not blocked(h) then
      zadd(key_q(queue, "ready"), h.pr, ready_member(id, h))
      wake(queue)
      moved = moved + 1
    end
  end
  return moved
end

-- The seed's expire_transition applied to a job whose lease has run out (fence as observed).
-- Returns the refusal or nil; on success the job has moved.
local function expire_job(id, h, now)
  if tonumber(h.x) > now then return refuse("LeaseHeld", h.x) end
  return move_or_fail(id, h, now, retry_or_fail(h, "LeaseExpired", "worker lease expired", now, 0))
end

-- Expires the leases of a queue that ran out, at most `limit`. Returns the ids it moved, and the
-- refusal that stopped it before any write (a key of the wrong type: an expiry may write any key
-- of the queue, so all are checked when a lease has run out).
-- A damaged job hash in the lease index is left where it is and reported, not touched.
local function expire_queue(queue, now, limit, out, damaged)
  local ids, bad = zread_typed("ZRANGEBYSCORE", key_q(queue, "leased"), "-inf", fmt(now),
    "LIMIT", "0", fmt(limit))
  if ids == nil then return out, bad end
  if ids[1] ~= nil then
    bad = check_queue(queue)
    if bad then return out, bad end
  end
  for _, id in ipairs(ids) do
    local h, err = load_job(id)
    if h == nil then
      if err[1] == "MissingJob" then
        zrem(key_q(queue, "leased"), id)
      else
        damaged[#damaged + 1] = id
      end
    elseif h.st ~= "L" then
      zrem(key_q(queue, "leased"), id)
    else
      local bad = expire_job(id, h, now)
      if bad then damaged[#damaged + 1] = id else out[#out + 1] = id end
    end
  end
  return out
end

-- The common opening of complete / fail / permanent_fail / heartbeat: ARGV[1] call id, ARGV[2]
-- now, ARGV[3..8] the token (job_id, input_revision, worker_id, fence, expires_at, nonce),
-- ARGV[9] the caller's worker id. Returns a context table, or nil and a refusal.
local function open_lease()
  local now, e = clock(ARGS[2])
  if now == nil then return nil, e end
  local t, worker = token_args(3)
  local h, err = load_job(t[1])
  if h == nil then return nil, err end
  return {cid = ARGS[1], now = now, id = t[1], h = h, t = t, worker = worker,
    record = recorded(ARGS[1])}
end

local function job_applied(c, now_text)
  return applied("JobApplied", now_text, job_reply(c.id, c.h))
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

-- The lease holder's edges, shared by their own scripts and by report.lua (many in one call).
-- Each takes a context from open_lease (c.id, c.h, c.t, c.worker, c.now), checks in the seed's
-- order, and returns a refusal, or nil once the job has moved.

-- What a completion writes: 3 TYPE calls, not the queue's 12 (see writes_error).
local COMPLETION_WRITES = {"leased", "succeeded"}

local function do_complete(c, output_ref, result)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  if output_ref == "" then return invalid("output_ref must not be empty") end
  bad = text_error(output_ref, "output_ref") or writes_error(c.h.q, COMPLETION_WRITES)
  if bad then return bad end
  local dependents, derr = load_dependents(c.id, c.h)
  if dependents == nil then return derr end
  -- An empty result (None) is not stored: the job reads back with no result either way.
  move(c.id, c.h, c.now, {st = "S", o = output_ref, res = result ~= "" and result or nil,
    fin = fmt(c.now)})
  release_dependents(dependents, c.now)
  return nil
end

local function do_fail(c, reason, delay_arg, kind)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  local delay, e = duration_arg(delay_arg, "retry_delay", 0)
  if delay == nil then return e end
  bad = time_error(c.now + delay, "now + retry_delay") or error_text_error(kind, reason)
    or check_queue(c.h.q)
  if bad then return bad end
  return move_or_fail(c.id, c.h, c.now, retry_or_fail(c.h, kind, reason, c.now, delay))
end

local function do_permanent_fail(c, reason, kind)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  if reason == "" then return invalid("reason must not be empty") end
  bad = error_text_error(kind, reason) or check_queue(c.h.q)
  if bad then return bad end
  return move_or_fail(c.id, c.h, c.now, {st = "F", fin = fmt(c.now), ek = kind, em = reason})
end

local function do_release(c, delay_arg)
  local bad = lease_error(c.id, c.h, c.t, c.worker, c.now)
  if bad then return bad end
  local delay, e = duration_arg(delay_arg, "delay", 0)
  if delay == nil then return e end
  bad = time_error(c.now + delay, "now + delay") or check_queue(c.h.q)
  if bad then return bad end
  move(c.id, c.h, c.now, {st = "W", at = fmt(c.now + delay), a = fmt(num(c.h.a) - 1)})
  return nil
end

-- One lease holder's call by name, with its three arguments (report.lua and the single scripts).
local LEASE_CALLS = {
  complete = function(c, a, b) return do_complete(c, a, b) end,
  fail = function(c, a, b, k) return do_fail(c, a, b, k) end,
  permanent_fail = function(c, a, _, k) return do_permanent_fail(c, a, k) end,
  release = function(c, a) return do_release(c, a) end,
}

-- The body of complete.lua / fail.lua / permanent_fail.lua / release.lua.
local function lease_call(name, a, b, k)
  local c, err = open_lease()
  if c == nil then return err end
  if c.record then return job_applied(c, "") end
  local bad = LEASE_CALLS[name](c, a, b, k)
  if bad then return bad end
  record(c.cid, "A")
  return job_applied(c, fmt(c.now))
end

-- Reports: many lease holders' outcomes in one call (report.lua, report_claim.lua) ------------
-- ARGS[base] holds the item count N (1..1000), then N groups of REPORT_GROUP arguments: call name,
-- token (job_id, input_revision, worker_id, fence, expires_at, nonce), a, b, k (see report.lua).

local REPORT_GROUP = 10

-- The item count, or nil and a refusal; the groups must end the arguments, and name known calls.
local function report_count(base)
  local n = int(ARGS[base])
  if n == nil or n < 1 or n > 1000 or #ARGS ~= base + n * REPORT_GROUP then
    return nil, invalid("malformed report call")
  end
  for i = 1, n do
    local name = ARGS[base + (i - 1) * REPORT_GROUP + 1]
    if LEASE_CALLS[name] == nil then return nil, invalid("unknown call '" .. name .. "'") end
  end
  return n
end

-- One item: its reply, and what the call record keeps of it (true: applied; else the refusal).
-- before: what the record of a re-sent call kept of it (nil on a first delivery).
local function report_item(base, i, now, worker, before)
  if type(before) == "table" then return before, before end -- refused the first time: again
  local b = base + (i - 1) * REPORT_GROUP
  local t = {ARGS[b + 2], ARGS[b + 3], ARGS[b + 4], ARGS[b + 5], ARGS[b + 6], ARGS[b + 7]}
  local h, err = load_job(t[1])
  if h == nil then return err, err end
  if before == true then return h.st, true end
  local bad = LEASE_CALLS[ARGS[b + 1]]({now = now, id = t[1], h = h, t = t, worker = worker},
    ARGS[b + 8], ARGS[b + 9], ARGS[b + 10])
  if bad then return bad, bad end
  return h.st, true
end

-- Applies the n items (appending their replies to out); returns the call record's encoding.
local function report_items(base, n, now, worker, before, out)
  local kept = {}
  for i = 1, n do
    out[#out + 1], kept[i] = report_item(base, i, now, worker, before[i])
  end
  return encode_items(kept)
end

-- Claims by queue (claim.lua, report_claim.lua) ------------------------------------------------

local MAINTENANCE = 100

-- The checks of a claim's arguments (queue, worker, lease duration, limit at ARGS[base..]):
-- lease_ms and limit, or nil and a refusal.
local function claim_args(base)
  local queue, worker = ARGS[base], ARGS[base + 1]
  if worker == "" then return nil, invalid("worker_id must not be empty") end
  local lease_ms, e = duration_arg(ARGS[base + 2], "lease_duration", 1)
  if lease_ms == nil then return nil, e end
  local bad = name_error(queue, "queue") or text_error(worker, "worker_id")
  if bad then return nil, bad end
  local limit = int(ARGS[base + 3])
  if limit == nil or limit < 1 or limit > 1000 then
    return nil, invalid("limit must be between 1 and 1000")
  end
  return lease_ms, limit
end

-- A re-sent claim's reply from its record: "id fence expires_at nonce" for each claim, in order.
local function claims_replayed(rec, worker)
  local out, f = {"ClaimsApplied", ""}, split(rec)
  for i = 1, #f, 4 do
    local id = f[i]
    local h = load_job(id)
    if h then out[#out + 1] = replayed_claim(id, h, worker, f[i + 1], f[i + 2], f[i + 3]) end
  end
  return out
end

local function next_due(queue)
  local best = nil
  for _, what in ipairs({"delayed", "leased"}) do -- (both read, so type-checked, by the opening)
    local first = zread("ZRANGE", key_q(queue, what), "0", "0", "WITHSCORES")
    if first[2] then
      local at = tonumber(first[2])
      if best == nil or at < best then best = at end
    end
  end
  return best and fmt(best) or ""
end

-- The keys a lease writes, type-checked once a call per queue (see writes_error): a job from
-- the ready index goes to the leased one; a retrying job also leaves the retrying index.
local LEASE_WRITES = {"ready", "leased"}
local RETRY_LEASE_WRITES = {"ready", "leased", "retrying"}

-- Leases up to `limit` jobs from the head of the ready index into out / rec; returns how many
-- index entries it dropped (left behind by hand). A damaged job, or one whose move would write a
-- key of the wrong type, is skipped and left as it is (damaged keeps the refusals, skipped the
-- ids): the jobs around it are still claimed.
local function take_some(cid, queue, worker, lease_ms, now, limit, out, rec, damaged, skipped)
  local dropped = 0
  local members = zread("ZRANGE", key_q(queue, "ready"), "0", fmt(limit - 1 + #damaged))
  for _, member in ipairs(members) do
    if #rec >= limit then break end
    local id = ready_id(member)
    local h, err, bad = nil, nil, nil
    if not skipped[id] then h, err = load_job(id) end
    if skipped[id] then -- damaged, seen on an earlier pass: read on past it
    elseif h == nil and err[1] ~= "MissingJob" then
      bad = err
    elseif h == nil then
      zrem(key_q(queue, "ready"), member)
      dropped = dropped + 1
    elseif (h.st == "W" or h.st == "R") and not blocked(h)
        and num(h.a) < num(h.m) and tonumber(h.at) <= now then
      bad = writes_error(h.q, h.st == "R" and RETRY_LEASE_WRITES or LEASE_WRITES)
      if bad == nil then
        local raw = RAW[id] -- the fields as loaded, before the lease (see claim.lua's replies)
        lease(id, h, worker, lease_ms, now, cid .. "." .. fmt(#rec + 1), member)
        out[#out + 1] = id
        out[#out + 1] = raw
        rec[#rec + 1] = id .. " " .. token_record(h)
      end
    else
      -- Not claimable after all: an entry left behind by hand, or a clock that went back (a
      -- failover to a server whose clock is behind). Drop the entry; a live job is re-indexed
      -- where it belongs (delayed or blocked), one out of attempts stays visible as waiting.
      -- Rare, and it may write any index of the job's queue: all of them are checked.
      bad = check_queue(h.q)
      if bad == nil then
        zrem(key_q(queue, "ready"), member)
        if (h.st == "W" or h.st == "R") and num(h.a) < num(h.m) then
          unplace(id, h)
          place(id, h, now)
        end
        dropped = dropped + 1
      end
    end
    if bad then
      damaged[#damaged + 1] = bad
      skipped[id] = true
      dropped = dropped + 1 -- not dropped, but skipped: read on past it
    end
  end
  return dropped
end

-- A claim of up to `limit` jobs of `queue`: its reply, and its call record (nil when it leased
-- nothing, or was refused: nothing to record). A damaged job among them is refused (CorruptJob)
-- only when it kept the call from claiming anything.
-- The keys every claim reads or writes (ready, leased; the events) are checked first; the others
-- only when a step is about to write them (due delayed jobs, run-out leases, a retrying or
-- misplaced job), before that step writes anything (a job whose own move would hit a bad key is
-- skipped as a damaged one is). Reads of the others refuse a key of the wrong type.
local function claim_queue(cid, now, queue, worker, lease_ms, limit)
  local bad = writes_error(queue, LEASE_WRITES)
  if bad then return bad end
  local _, bad2 = promote_queue(queue, now, MAINTENANCE)
  if bad2 then return bad2 end
  _, bad2 = expire_queue(queue, now, MAINTENANCE, {}, {})
  if bad2 then return bad2 end
  local out, rec, damaged, skipped = {"ClaimsApplied", fmt(now)}, {}, {}, {}
  for _ = 1, 3 do
    local dropped = take_some(cid, queue, worker, lease_ms, now, limit, out, rec, damaged, skipped)
    if dropped == 0 or #rec >= limit then break end
  end
  if #rec == 0 then return damaged[1] or refuse("NothingClaimable", next_due(queue)) end
  return out, table.concat(rec, " ")
end

-- The common opening of expire / cancel / operator_retry: ARGV[1] call id, ARGV[2] now,
-- ARGV[3] job id, ARGV[4] the fence the caller observed ("" = the current one, cancel and
-- operator_retry only). Returns a context table, or nil and a refusal (FenceChanged included).
local function open_fenced(allow_any)
  local now, e = clock(ARGS[2])
  if now == nil then return nil, e end
  local h, err = load_job(ARGS[3])
  if h == nil then return nil, err end
  local c = {cid = ARGS[1], now = now, id = ARGS[3], h = h}
  c.record = recorded(c.cid)
  if c.record then return c end
  local fence = ARGS[4]
  if fence == "" and allow_any then return c end
  if int(fence) == nil then return nil, invalid("expected_fence must be an integer") end
  if tonumber(fence) ~= tonumber(h.f) then return nil, refuse("FenceChanged") end
  return c
end

-- Every call runs through here: `main` with this call's keys and arguments, and none of the state
-- of an earlier call (a function library keeps its locals from one call to the next; a script's
-- chunk is run anew for each). Then the buffered writes, events and wake-ups.
local function run_call(keys, args, main)
  P, EVENTS, ARGS = keys[1], keys[2], args
  KEY_QUEUES, KEY_SEQ = P .. "queues", P .. "seq"
  KEY_Q, IMPLICIT_INS, RAW, CHANGED, CHECKED, NAMES_OK = {}, {}, {}, {}, {}, {}
  EVENT_RUNS, AT_BYTES, TEXT_OF, INT_OK = {}, {}, {}, nil
  -- Left empty by the last call unless it stopped half-way (a script error): then made anew.
  if INDEX_KEYS[1] ~= nil then INDEX, INDEX_KEYS = {}, {} end
  if next(WOKEN) ~= nil then WOKEN = {} end
  return finish(main())
end
