-- gcra: package bucket's generic cell rate algorithm (redis-cell's
-- parameters) on one bucket in Redis (state.lua is the request).
--
-- ARGV[3..4]  T = period/count ns, limit = burst+1
-- State: tat (a time), 0, 0.
-- #include clock.lua

local t, limit -- the request's, set by params

local function params(argv)
  t, limit = tonumber(argv[3]), tonumber(argv[4])
end

local function decode(raw)
  local t = string.match(raw, "^(%d+) 0 0$")
  if t then return offset(t), 0, 0 end
end

local function encode(tat)
  return absolute(tat) .. " 0 0"
end

local function init()
  return 0, 0, 0
end

local function fresh_at(tat)
  return tat
end

local function decide(n, tat)
  local allowed, retry = 0, -1
  local tau = limit * t
  local ttl = math.max(tat, 0)
  if n <= limit then
    local inc = n * t
    if ttl > tau - inc then
      retry = ttl - (tau - inc)
    else
      allowed = 1
      if n > 0 then
        ttl = ttl + inc
        tat = ttl
      end
    end
  end
  return allowed, idiv(math.max(tau - ttl, 0), t), retry, math.max(tat, 0), 0, tat, 0, 0
end

local function refund(n, tat)
  if n > 0 and tat > 0 then return math.max(tat - n * t, 0), 0, 0 end
  return tat, 0, 0
end

local lease_end = nil
-- #include state.lua
