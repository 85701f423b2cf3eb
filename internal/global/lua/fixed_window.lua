-- fixed_window: package bucket's fixed window on one bucket in Redis
-- (state.lua is the request).
--
-- ARGV[3..4]  max, window ns (window.lua)
-- State: window start (a time), count, 0.
-- #include window.lua

local function decode(raw)
  local t, count = string.match(raw, "^(%d+) (%d+) 0$")
  if t then return offset(t), tonumber(count), 0 end
end

local function encode(start, count)
  return absolute(start) .. string.format(" %d 0", count)
end

local function init()
  return window_start(), 0, 0
end

local function fresh_at(start, count)
  if count <= 0 then return NEG end
  return start + window
end

-- current returns the start and count of the window now is in.
local function current(start, count)
  local now_start = window_start()
  if start >= now_start then return start, math.max(count, 0) end
  return now_start, 0
end

local function decide(n, s1, s2)
  local allowed, retry, reset = 0, -1, 0
  local start, count = current(s1, s2)
  if n <= limit_max - count then
    allowed = 1
    if n > 0 then
      count = count + n
      s1, s2 = start, count
    end
  elseif n <= limit_max then
    retry = math.max(start + window, 1)
  end
  if count > 0 then reset = math.max(start + window, 0) end
  return allowed, math.max(limit_max - count, 0), retry, reset, 0, s1, s2, 0
end

local function refund(n, s1, s2)
  if n > 0 then
    local start, count = current(s1, s2)
    if count > 0 then return start, count - math.min(n, count), 0 end
  end
  return s1, s2, 0
end

local function lease_end(s1, s2)
  return current(s1, s2) + window
end
-- #include state.lua
