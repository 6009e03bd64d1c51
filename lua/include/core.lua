-- core.lua: the values every script needs: limits, key names, integers as text, replies,
-- the clock.
--
-- The files of lua/include/ hold the steps the scripts share, one file per concern. Each file
-- and each script names the files it uses on its line "-- uses: ...", and takes their steps by
-- name at its top (local fmt = Core.fmt): the loader (quasar_redis/_scripts.py) follows these
-- lines. Each script's own file shows its edge: its checks in order and its writes, calling
-- these steps.
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
-- Job hash fields (a hash at KEYS[1].."job:"..id; the id is the key suffix), declared with their
-- defaults in quasar_redis/_schema.py (tests/test_schema.py holds the scripts to it):
--   q queue, s stage, p payload (msgpack bytes), ir input_ref, rv input_revision,
--   dp dependencies (space-separated ids), pd dependencies not yet succeeded, odf on-dependency-
--   failure policy ("block" | "cancel" | "run"), pr priority, sq enqueue sequence, a attempt,
--   m max_attempts, f fencing_version, st state tag (W R L S F C E), at available_at (W, R),
--   w worker, x lease expires_at, n lease nonce (L), ek / em last error kind / message,
--   cr cancel reason, o output_ref, res result (msgpack bytes), ins inserted_at,
--   att attempted_at, fin finished_at (S, F, C, E), hd "1" once another job depends on this one
--   (so that jobs nobody depends on never read their dependents set), ec the id of the call that
--   enqueued it (a re-sent enqueue finds its jobs by it), cw how many of its cascade items are
--   not done (cascades.lua), dl deadline: the time by which the job must have started (a job
--   never started expires then: st E; absent: none), uq its dedup key and mode (unique.lua),
--   g its flow group (flow_control.lua; absent: none), rd under policy "run": the dependencies
--   counted as resolved though they did not succeed (cascades.lua; absent: none), bt its batch
--   (the one it is a member of), cbo the batch it is a callback of (batches.lua; absent: none),
--   pv / pm / pt / pa its last progress: value, message, time written and attempt
--   (progress.lua; absent: none reported).
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
-- Periodic schedules (docs/schedules.md): a hash per schedule, and their names by next tick.
local function key_schedule(ctx, name) return ctx.prefix .. "schedule:" .. name end
local function key_schedules(ctx) return ctx.prefix .. "schedules" end
-- Batches (docs/workflows.md, include/batches.lua): a hash per batch, and a list of its members'
-- ids in the order they were added (a family of its own: a batch id may hold any character);
-- the ids of the batches done (closed, every member ended) by the time they became done, for
-- prune.lua.
local function key_batch(ctx, id) return ctx.prefix .. "batch:" .. id end
local function key_members(ctx, id) return ctx.prefix .. "members:" .. id end
local function key_batches_done(ctx) return ctx.prefix .. "batches_done" end
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
-- taken for an absent or damaged value. Redis 7+ and Valkey (known by redis.acl_check_cmd) raise
-- the error reply as it came; Redis 6.2 takes only a text, its handler failing on a table.
local function pcall_typed(...)
  local reply = redis.pcall(...)
  if type(reply) == "table" and reply.err and not string.find(tostring(reply.err), "WRONGTYPE", 1, true) then
    if redis.acl_check_cmd then error(reply) end
    error(reply.err)
  end
  return reply
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

local function clock(arg)
  if arg == nil or arg == "" then
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local n = int(arg)
  if n == nil or n < 0 then return nil, invalid("now must be a nonnegative integer") end
  return n
end

local function split(s)
  local out = {}
  for part in string.gmatch(s, "%S+") do out[#out + 1] = part end
  return out
end


local NONE = {} -- an empty list, never written to
local TERMINAL = {S = true, F = true, C = true, E = true}

-- The failure history of a job (docs/lifecycle.md, "Failure history"): its last 5 failed
-- attempts, newest first, in the list KEYS[1].."errors:"..id (type-checked by each caller before
-- its first write), each "<attempt> <at> <kind> <length of message>:<message><traceback>".
-- Prune deletes it with the job.
local function key_errors(ctx, id) return ctx.prefix .. "errors:" .. id end

