-- report_many: many lease holders' outcomes in one call (a worker's batch): each item is one of
-- complete / fail / permanent_fail / release, checked and applied on its own exactly as its own
-- script would, by that script's edge (complete_job in complete.lua, fail_job in fail.lua,
-- permanent_fail_job in permanent_fail.lua, release_job in release.lua): a refused item changes
-- nothing and does not stop the others. report_and_claim.lua applies its items with report_items.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] caller's worker id
-- ARGV[4]  item count N (1..1000), then N groups of 11:
--   call name, token (job_id, input_revision, worker_id, fence, expires_at, nonce), a, b, k, d
--   complete: a output_ref, b result, k result_ttl ms ("": none)
--   fail: a reason, b retry delay ms, k error kind, d traceback ("": none)
--   permanent_fail: a reason, k error kind, d traceback   release: a delay ms, b hold ms ("": none)
--
-- Replies
--   {"Reported", now, result...}   each result the job's new state tag (S R F W) when applied, or
--                                  a refusal as its own script gives it ({"StaleLease"},
--                                  {"LeaseExpired", at}, ...)
--   {"InvalidJob", reason}         a malformed call (nothing applied)
-- Replies are slim (no job fields): a worker reporting thousands of outcomes needs to know only
-- which were applied. A re-sent call (same call id) gets every item's first answer again:
-- OutcomeApplied for those applied, the same refusal for the others; it changes nothing more.

-- uses: core, job, call, complete, fail, permanent_fail, release, callbacks
local clock, fmt, int, invalid = Core.clock, Core.fmt, Core.int, Core.invalid
local load_job = Job.load_job
local decode_items, encode_items, record = Call.decode_items, Call.encode_items, Call.record
local recorded, run_call = Call.recorded, Call.run_call
local complete_job = Complete.complete_job
local fail_job = Fail.fail_job
local permanent_fail_job = PermanentFail.permanent_fail_job
local release_job = Release.release_job
local fire_due = Callbacks.fire_due

local REPORT_GROUP = 11

-- Each call name's edge, given an item's a, b, k and d.
local OUTCOME_EDGES = {
  complete = function(ctx, c, a, b, k) return complete_job(ctx, c, a, b, k) end,
  fail = function(ctx, c, a, b, k, d) return fail_job(ctx, c, a, b, k, d) end,
  permanent_fail = function(ctx, c, a, _, k, d) return permanent_fail_job(ctx, c, a, k, d) end,
  release = function(ctx, c, a, b) return release_job(ctx, c, a, b) end,
}

-- The item count at ARGV[base], or nil and a refusal; the groups must end the arguments, and
-- name known calls.
local function report_count(ctx, base)
  local args = ctx.args
  local n = int(args[base])
  if n == nil or n < 1 or n > 1000 or #args ~= base + n * REPORT_GROUP then
    return nil, invalid("malformed report call")
  end
  for i = 1, n do
    local name = args[base + (i - 1) * REPORT_GROUP + 1]
    if OUTCOME_EDGES[name] == nil then return nil, invalid("unknown call '" .. name .. "'") end
  end
  return n
end

-- One item: its reply, and what the call record keeps of it (true: applied; else the refusal).
-- before: what the record of a re-sent call kept of it (nil on a first delivery).
local function report_item(ctx, base, i, now, worker, before)
  if type(before) == "table" then return before, before end -- refused the first time: again
  local args = ctx.args
  local o = base + (i - 1) * REPORT_GROUP
  -- The item's arguments by name: the layout quasar_redis/_schema.py's REPORT_ITEM declares (the
  -- token's six as lease.lua's open_lease reads them; tests/test_schema.py holds the two to each
  -- other).
  local t = {args[o + 2], args[o + 3], args[o + 4], args[o + 5], args[o + 6], args[o + 7]}
  local h, err = load_job(ctx, t[1])
  if h == nil then return err, err end
  if before == true then return h.st, true end
  local call, a, b, k, d = args[o + 1], args[o + 8], args[o + 9], args[o + 10], args[o + 11]
  local bad = OUTCOME_EDGES[call](ctx, {now = now, id = t[1], h = h, t = t, worker = worker},
    a, b, k, d)
  if bad then return bad, bad end
  return h.st, true
end

-- Applies the n items of the groups after ARGV[base] (appending their replies to out); returns
-- the call record's encoding. items: {base, n, now, worker}; before: the items the record of a
-- re-sent call kept.
local function report_items(ctx, items, before, out)
  local base, n, now, worker = items.base, items.n, items.now, items.worker
  local kept = {}
  for i = 1, n do
    out[#out + 1], kept[i] = report_item(ctx, base, i, now, worker, before[i])
  end
  return encode_items(kept)
end

local function report_many_main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local n, bad = report_count(ctx, 4)
  if n == nil then return bad end
  local out = {"Reported", fmt(ctx, now)}
  local items = {base = 4, n = n, now = now, worker = args[3]}
  record(ctx, report_items(ctx, items, decode_items(recorded(ctx)), out))
  return out
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, report_many_main(ctx)) end

return run_call(KEYS, ARGV, main)
