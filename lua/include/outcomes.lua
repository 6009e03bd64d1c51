-- outcomes.lua: openings and outcomes of the operator and recovery calls.

-- uses: core, checks, job, call
local applied, clock, fmt, int, invalid = Core.applied, Core.clock, Core.fmt, Core.int, Core.invalid
local key_errors, num, refuse = Core.key_errors, Core.num, Core.refuse
local id_error = Checks.id_error
local job_reply, load_job = Job.job_reply, Job.load_job
local recorded = Call.recorded

-- docs/lifecycle.md's retry_or_fail: the changes to apply (fail.lua, expire.lua).
local function retry_or_fail(ctx, h, kind, reason, now, delay)
  if num(h.a) < num(h.m) then
    return {st = "R", at = fmt(ctx, now + delay), ek = kind, em = reason}
  end
  return {st = "F", fin = fmt(ctx, now), ek = kind, em = reason}
end

-- Keeps the failed attempt of job `id` (its attempt h.a, at now) in its history; failure:
-- {kind, reason, trace} ("" for none).
local function keep_error(ctx, id, h, now, failure)
  local kind, reason, trace = failure.kind, failure.reason, failure.trace
  local kept, k = 5, key_errors(ctx, id)
  local entry = h.a .. " " .. fmt(ctx, now) .. " " .. kind .. " " .. #reason .. ":" .. reason
  if redis.call("LPUSH", k, entry .. trace) > kept then
    redis.call("LTRIM", k, "0", fmt(ctx, kept - 1))
  end
end

local function job_applied(ctx, c, now_text)
  return applied("JobApplied", now_text, job_reply(ctx, c.id, c.h))
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

