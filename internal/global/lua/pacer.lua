-- pacer: package bucket's pacer on one bucket in Redis (state.lua is the
-- request). It cannot be leased: its replies carry a delay.
--
-- ARGV[3..4]  I = ceil(period/count) ns, max_delay ns
-- State: next free slot (a time), 0, 0.
-- #include clock.lua

local interval, max_delay -- the request's, set by params

local function params(argv)
  interval, max_delay = tonumber(argv[3]), tonumber(argv[4])
end

local function decode(raw)
  local t = string.match(raw, "^(%d+) 0 0$")
  if t then return offset(t), 0, 0 end
end

local function encode(slot)
  return absolute(slot) .. " 0 0"
end

local function init()
  return 0, 0, 0
end

local function fresh_at(slot)
  return slot
end

local function decide(n, next_slot)
  local allowed, retry, delay = 0, -1, 0
  local slot = math.max(next_slot, 0)
  if slot > max_delay then
    retry = slot - max_delay
  elseif n * interval > LIM - slot then
    -- the slots would end past LIM: never allowed
  else
    allowed, delay = 1, slot
    if n > 0 then next_slot = slot + n * interval end
  end
  local wait, remaining = math.max(next_slot, 0), 0
  if wait <= max_delay then remaining = idiv(max_delay - wait, interval) + 1 end
  return allowed, remaining, retry, wait, delay, next_slot, 0, 0
end

local function refund(n, next_slot)
  if n > 0 and next_slot > 0 then return math.max(next_slot - n * interval, 0), 0, 0 end
  return next_slot, 0, 0
end

local lease_end = nil
-- #include state.lua
