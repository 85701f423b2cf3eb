-- Integer helpers. Lua's numbers are doubles, exact for integers below
-- 2^53; these are exact for operands below 2^53.

local TWO53 = 9007199254740992
local fmod -- math.fmod, bound by clock (clock.lua) at the start of each request

-- idiv returns floor(a/b) for a >= 0, b >= 1.
local function idiv(a, b)
  return (a - fmod(a, b)) / b
end

-- ceildiv returns ceil(a/b) for a >= 0, b >= 1.
local function ceildiv(a, b)
  local r = fmod(a, b)
  if r == 0 then return (a - r) / b end
  return (a - r) / b + 1
end

local function clamp(v, lo, hi)
  if v < lo then return lo end
  if v > hi then return hi end
  return v
end
