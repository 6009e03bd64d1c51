-- report_and_claim: a worker's outcomes and its next claim in one call: report_many.lua's items (its
-- report_count and report_items), then claim.lua's claim (its claim_args and claim_queue; the
-- outcomes first, so that a job whose last dependency completes here can be claimed by this very
-- call). Each part is applied or refused on its own, exactly as its own script would: a refused
-- outcome does not stop the claim, and a claim that finds nothing (or is refused) does not undo
-- the outcomes.
--
-- KEYS[1]  namespace prefix   KEYS[2] event stream (optional)
-- ARGV[1]  call id   ARGV[2] now ("" = server clock)   ARGV[3] queue   ARGV[4] worker id
-- ARGV[5]  lease duration ms   ARGV[6] claim limit (1..1000)
-- ARGV[7]  item count N (1..1000), then N groups of 11 as in report_many.lua
--
-- Replies
--   {"ReportClaimed", now, {result...}, claim}   the results as report_many.lua gives them, and the
--                                  claim's reply as claim.lua gives it (ClaimsApplied with each
--                                  job's fields before the lease, NothingClaimable, a refusal:
--                                  QueuePaused for a paused queue, whose outcomes still count)
--   {"InvalidJob", reason}         a malformed call (nothing applied)
-- Re-sent calls: the call record is "<n>:<claim record><items>" when the claim leased jobs (n the
-- length of the claim's record, as claim.lua keeps it) or "-<items>" when it did not (the
-- outcomes as report_many.lua keeps them). A re-sent call gets every outcome's first answer again and
-- the claims first handed out; a claim that leased nothing the first time is made anew.

-- uses: core, call, claim, report_many, callbacks
local CALL_TTL_TEXT, clock, fmt, key_call = Core.CALL_TTL_TEXT, Core.clock, Core.fmt, Core.key_call
local decode_items, record, recorded = Call.decode_items, Call.record, Call.recorded
local run_call = Call.run_call
local claim_args, claim_queue = Claim.claim_args, Claim.claim_queue
local claims_replayed = Claim.claims_replayed
local report_count, report_items = ReportMany.report_count, ReportMany.report_items
local fire_due = Callbacks.fire_due

local function report_and_claim_main(ctx)
  local args = ctx.args
  local now, e = clock(args[2])
  if now == nil then return e end
  local queue, worker = args[3], args[4]
  local lease_ms, limit = claim_args(ctx, 3)
  if lease_ms == nil then return limit end
  local n, bad = report_count(ctx, 7)
  if n == nil then return bad end
  local again, claimed, items = recorded(ctx), nil, nil
  if again and string.sub(again, 1, 1) == "-" then
    items = string.sub(again, 2)
  elseif again then
    local colon = string.find(again, ":", 1, true)
    local len = colon and tonumber(string.sub(again, 1, colon - 1))
    if len then
      claimed = string.sub(again, colon + 1, colon + len)
      items = string.sub(again, colon + len + 1)
    end
  end
  local results = {}
  local held = {base = 7, n = n, now = now, worker = worker}
  local kept = report_items(ctx, held, decode_items(items), results)
  if claimed then
    return {"ReportClaimed", fmt(ctx, now), results, claims_replayed(ctx, claimed, worker)}
  end
  fire_due(ctx, nil, now) -- (a callback the report fired may be claimed by this very call)
  local claim, rec = claim_queue(ctx, now, queue, worker, lease_ms, limit)
  local value = rec and (#rec .. ":" .. rec .. kept) or ("-" .. kept)
  if again == nil then
    record(ctx, value)
  elseif rec then -- a re-sent call whose claim leased nothing the first time, and now did
    redis.call("SET", key_call(ctx), value, "PX", CALL_TTL_TEXT)
  end
  return {"ReportClaimed", fmt(ctx, now), results, claim}
end

-- A batch member that ended in this call fires its batch's callbacks (include/callbacks.lua).
local function main(ctx) return fire_due(ctx, report_and_claim_main(ctx)) end

return run_call(KEYS, ARGV, main)
