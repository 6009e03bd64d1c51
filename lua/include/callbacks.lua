-- callbacks.lua: a batch's callbacks enqueued, once each, when its last member ends.

-- uses: core, checks, job, events, batches
local clock, fmt, key_batch, key_job = Core.clock, Core.fmt, Core.key_batch, Core.key_job
local key_batches_done = Core.key_batches_done
local key_queues, key_seq, refuse = Core.key_queues, Core.key_seq, Core.refuse
local check_queue = Checks.check_queue
local field_args, place = Job.field_args, Job.place
local emit = Events.emit
local CALLBACKS, count, load_batch = Batches.CALLBACKS, Batches.count, Batches.load_batch

-- Firing (docs/workflows.md, "Batches"): once a batch is closed and every member is terminal,
-- on_complete fires; on_failure too when some member did not succeed; on_success when every
-- member succeeded (an empty batch: at close). Each at most once, ever: its k.id (or k.x, the
-- refusal that kept it out) is written with it, in the same call.
-- Its job was checked as enqueue.lua checks a job when the batch was opened (open_batch.lua);
-- here it is written as enqueue's write_one writes a new job without dependencies, available
-- now (the same fields, index and event), after the checks that can have changed since: its id
-- taken (DuplicateJob), its queue's keys (CorruptKey). (Taking enqueue's own steps here would
-- put all of enqueue in every script that ends a job: past Lua's 200 locals in claim.lua.)
-- (One top-level definition: the steps are made only in a call that has a batch to look at, and
-- count for nothing against the 200 locals of the scripts that end jobs.)

-- Fires every batch whose counts this call changed (ctx.batches, Batches.batch_counted), in id
-- order, and enters each one done in KEYS[1].."batches_done"; returns `reply`. Every script
-- that may move a member into a terminal state ends with it.
-- now: the call's (nil: read again, as the call read it; a callback is available from then).
local function fire_due(ctx, reply, now)
  local due = ctx.batches
  if due == nil then return reply end
  ctx.batches = nil
  now = now or clock(ctx.args[2]) or clock("")
  local now_text = fmt(ctx, now)

  local function fire_one(id, k, name, b)
    local job_id, q = id .. "@" .. name, b[k .. ".q"]
    local bad = (redis.call("EXISTS", key_job(ctx, job_id)) == 1 and refuse("DuplicateJob", job_id))
      or check_queue(ctx, q)
    if bad then
      redis.call("HSET", key_batch(ctx, id), k .. ".x", bad[1] .. " " .. tostring(bad[2] or ""))
      return
    end
    -- (the next sequence number, taken by GET and SET rather than INCRBY: an operator's cancel
    -- may fire a callback, and the operator role, which may not enqueue, lacks INCRBY)
    local seq = (tonumber(redis.call("GET", key_seq(ctx)) or "0") or 0) + 1
    redis.call("SET", key_seq(ctx), fmt(ctx, seq))
    redis.call("SADD", key_queues(ctx), q)
    local h = {q = q, s = b[k .. ".s"], p = b[k .. ".p"] or "", ir = "inline", rv = "0", dp = "",
      pd = "0", odf = "block", pr = b[k .. ".pr"], sq = fmt(ctx, seq), a = "0", m = b[k .. ".m"],
      f = "0", st = "W", at = now_text, ins = now_text, cbo = id}
    local args = {"s", h.s, "st", "W", "at", now_text, "sq", h.sq, "cbo", id}
    field_args(args, "p", h.p)
    if q ~= "default" then args[#args + 1] = "q"; args[#args + 1] = q end
    if h.pr ~= "0" then args[#args + 1] = "pr"; args[#args + 1] = h.pr end
    if h.m ~= "3" then args[#args + 1] = "m"; args[#args + 1] = h.m end
    redis.call("HSET", key_job(ctx, job_id), unpack(args))
    place(ctx, job_id, h, now)
    emit(ctx, job_id, h, "available")
    redis.call("HSET", key_batch(ctx, id), k .. ".id", job_id)
  end

  local ids = {}
  for id in pairs(due) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do
    local b = load_batch(ctx, id)
    local n = b and count(b, "n")
    if b and b.cl == "1" and count(b, "nS") + count(b, "nF") + count(b, "nC") + count(b, "nE") >= n then
      -- done: indexed by the time it became done, for prune.lua (kept while it stays done)
      redis.pcall("ZADD", key_batches_done(ctx), "NX", now_text, id)
      local wanted = {s = count(b, "nS") == n, f = count(b, "nS") < n, c = true}
      for _, kind in ipairs(CALLBACKS) do
        local k = kind[1]
        if b[k .. ".s"] and not b[k .. ".id"] and not b[k .. ".x"] and wanted[k] then
          fire_one(id, k, kind[2], b)
        end
      end
    end
  end
  return reply
end
