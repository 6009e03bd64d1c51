-- checks.lua: checks of arguments and of the types of keys, each a refusal or nil.

-- uses: core
local ID_MAX, int, invalid, key_q = Core.ID_MAX, Core.int, Core.invalid, Core.key_q
local key_queues, key_seq, NAME_MAX = Core.key_queues, Core.key_seq, Core.NAME_MAX
local refuse, STAGE_MAX, TEXT_MAX = Core.refuse, Core.STAGE_MAX, Core.TEXT_MAX

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
  "succeeded", "failed", "cancelled", "expiring", "expired", "deadlines"}

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


-- Refusal for kind / reason arguments of fail-like calls.
local function error_text_error(kind, reason)
  if not valid_name(kind, NAME_MAX) then
    return invalid("error kind must be 1-" .. NAME_MAX .. " characters of letters, digits, '_', '.', '-'")
  end
  return text_error(reason, "reason")
end


