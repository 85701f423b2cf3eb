-- sliding_window: package bucket's sliding window (the previous window's
-- count weighted by its overlap) on one bucket in Redis (state.lua is the
-- request). The weighted counts are compared and divided exactly
-- (wide.lua).
--
-- ARGV[3..4]  max, window ns (window.lua)
-- State: window start (a time), previous count, current count.
-- #include window.lua
-- #include wide.lua

local function decode(raw)
  local t, prev, curr = string.match(raw, "^(%d+) (%d+) (%d+)$")
  if t then return offset(t), tonumber(prev), tonumber(curr) end
end

local function encode(start, prev, curr)
  return absolute(start) .. string.format(" %d %d", prev, curr)
end

local function init()
  return window_start(), 0, 0
end

local function fresh(start, prev, curr)
  if curr > 0 then return start + 2 * window end
  if prev > 0 then return start + window end
  return NEG
end

local function fresh_at(start, prev, curr)
  return fresh(start, math.max(prev, 0), math.max(curr, 0))
end

-- current returns the start of the window now is in, the counts of the
-- window before it and of it, and the time elapsed in it.
local function current(stored, p, c)
  local start = window_start()
  p, c = math.max(p, 0), math.max(c, 0)
  local prev, curr = 0, 0
  if stored >= start then
    start, prev, curr = stored, p, c
  elseif start - stored <= window then
    prev = c
  end
  return start, prev, curr, math.max(-start, 0)
end

-- passes_from returns when in a window a request of n passes, given the
-- counts pv of the window before and cu of the window, and whether it
-- passes in that window at all.
local function passes_from(n, pv, cu)
  if n > limit_max - cu then return 0, false end
  if pv == 0 then return 0, true end
  local q = muldiv(limit_max - cu - n, window, pv)
  if q >= window then return 0, true end
  local e = window - q
  return e, e < window
end

local function decide(n, s1, s2, s3)
  local allowed, retry = 0, -1
  local max, w = limit_max, window
  local start, prev, curr, elapsed = current(s1, s2, s3)
  if n <= max - curr and mulle(prev, w - elapsed, max - curr - n, w) then
    allowed = 1
    if n > 0 then
      curr = curr + n
      s1, s2, s3 = start, prev, curr
    end
  elseif n <= max then
    local at
    local e, ok = passes_from(n, prev, curr)
    if ok then
      at = start + math.max(e, elapsed)
    else
      e, ok = passes_from(n, curr, 0)
      if ok then at = start + w + e else at = start + 2 * w end
    end
    retry = math.max(at, 1)
  end
  -- floor(max - estimate) = max - curr - ceil(prev*(w-elapsed)/w)
  local weighted = prev - muldiv(prev, elapsed, w)
  return allowed, math.max(max - curr - weighted, 0), retry, math.max(fresh(start, prev, curr), 0), 0, s1, s2, s3
end

local function refund(n, s1, s2, s3)
  if n <= 0 then return s1, s2, s3 end
  local start, prev, curr = current(s1, s2, s3)
  if prev == 0 and curr == 0 then return s1, s2, s3 end
  local from_curr = math.min(n, curr)
  return start, prev - math.min(n - from_curr, prev), curr - from_curr
end

local function lease_end(s1, s2, s3)
  return current(s1, s2, s3) + window
end
-- #include state.lua
