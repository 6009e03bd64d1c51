-- revise.lua: a live job given a new input revision (docs/lifecycle.md, "Supersede"): enqueue's
-- step for an id stored with a lower revision than the one given, and change.lua's for a new
-- input.
--
-- A new revision is new work. The job takes the new payload (and input_ref) and revision and is
-- Waiting again with its attempts afresh (attempt 0: an attempt of an older revision does not
-- count against max_attempts); its fence is kept, so a fence observed before still tells that it
-- changed. A Waiting job keeps its place (available_at, sequence); a RetryWaiting job and a
-- Leased one (whose lease is dropped: the holder's next heartbeat, completion or failure is
-- refused StaleLease, its token naming the old revision) are available now. A finished job is
-- never revised.

-- uses: core, events, job
local fmt, num, refuse, TERMINAL = Core.fmt, Core.num, Core.refuse, Core.TERMINAL
local key_job = Core.key_job
local emit = Events.emit
local move, status_name, PAYLOAD_CHUNKS = Job.move, Job.status_name, Job.PAYLOAD_CHUNKS

-- Enqueue's answer for job `id` found stored as h, asked again with revision rv (a number): nil
-- when it supersedes (a live job, a higher revision); StaleRevision(id, stored) for a lower one;
-- DuplicateJob for the same revision or a finished job.
local function supersede_error(id, h, rv)
  if rv < num(h.rv) then return refuse("StaleRevision", id, h.rv) end
  if rv == num(h.rv) or TERMINAL[h.st] then return refuse("DuplicateJob", id) end
  return nil
end

-- The changes giving live job h the input {p, rv (text), ir (nil: kept)}: see the top. More
-- changes (a priority, a time) may be added before revise() writes them.
local function revision_changes(ctx, h, now, input)
  local changes = {p = input.p, rv = input.rv, st = "W"}
  if input.ir ~= nil and input.ir ~= h.ir then changes.ir = input.ir end
  if h.st ~= "W" then changes.at = fmt(ctx, now) end
  return changes
end

-- Writes `changes` into waiting or retry-waiting job `id` (from revision_changes, or a priority
-- or time alone): a new input drops the old payload's chunks and the attempt, and the job replies
-- from h from here on (what it loaded holds the old chunks). The job moves between indexes, and
-- the status it enters is an event even when its state stays.
local function rewrite(ctx, id, h, now, changes)
  if changes.p ~= nil then
    -- (the attempt back at its default, which is not stored, and every chunk of the payload)
    redis.call("HDEL", key_job(ctx, id), "a", unpack(PAYLOAD_CHUNKS))
    for _, f in ipairs(PAYLOAD_CHUNKS) do h[f] = nil end
    h.a = "0"
  end
  local before = h.st
  move(ctx, id, h, now, changes)
  if h.st == before then emit(ctx, id, h, status_name(h, now)) end
  if changes.p ~= nil then ctx.loaded[id], ctx.changed[id] = nil, nil end
end
