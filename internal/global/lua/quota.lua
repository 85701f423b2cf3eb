-- quota: package bucket's quota on one bucket in Redis (state.lua is the
-- request): a count per period of a calendar in a time zone. Redis cannot
-- compute a time zone's calendar, so the caller sends the boundaries of
-- three consecutive periods around its own clock, and the script takes the
-- one that holds its now (Redis's TIME, or the explicit time): Redis's
-- clock still decides which period a request falls in.
--
-- ARGV[3]     limit, the tokens a period admits
-- ARGV[4..7]  b0 < b1 < b2 < b3, absolute Unix ns: the periods [b0, b1),
--             [b1, b2) (the caller's now is in it) and [b2, b3)
-- State: period start (a time), count, period end (a time).
-- A now in none of the three (the caller's clock is a period or more away
-- from Redis's) is refused, changing nothing.
-- #include clock.lua

local limit_max, pstart, pend -- the request's, set by params

local function params(argv)
  limit_max = tonumber(argv[3])
  local b0, b1, b2, b3 = offset(argv[4]), offset(argv[5]), offset(argv[6]), offset(argv[7])
  if b1 <= 0 and 0 < b2 then
    pstart, pend = b1, b2
  elseif b0 <= 0 and 0 < b1 then
    pstart, pend = b0, b1
  elseif b2 <= 0 and 0 < b3 then
    pstart, pend = b2, b3
  else
    return "ERR sluice: the quota's periods do not hold Redis's time: the host's clock is a period or more away from Redis's"
  end
end

local function decode(raw)
  local s, count, e = string.match(raw, "^(%d+) (%d+) (%d+)$")
  if s then return offset(s), tonumber(count), offset(e) end
end

local function encode(s, count, e)
  return absolute(s) .. string.format(" %d ", count) .. absolute(e)
end

local function init()
  return pstart, 0, pend
end

local function fresh_at(s, count, e)
  if count <= 0 then return NEG end
  return e
end

-- current returns the period that applies at now and its count: the
-- stored one until its end, or if it is later than now's (time went
-- backwards); else now's, empty.
local function current(s, count, e)
  if 0 < e or s >= pstart then return s, math.max(count, 0), e end
  return pstart, 0, pend
end

local function decide(n, s1, s2, s3)
  local allowed, retry, reset = 0, -1, 0
  local s, count, e = current(s1, s2, s3)
  if n <= limit_max - count then
    allowed = 1
    if n > 0 then
      count = count + n
      s1, s2, s3 = s, count, e
    end
  elseif n <= limit_max then
    retry = math.max(e, 1)
  end
  if count > 0 then reset = math.max(e, 0) end
  return allowed, math.max(limit_max - count, 0), retry, reset, 0, s1, s2, s3
end

local function refund(n, s1, s2, s3)
  if n > 0 then
    local s, count, e = current(s1, s2, s3)
    if count > 0 then return s, count - math.min(n, count), e end
  end
  return s1, s2, s3
end

local function lease_end(s1, s2, s3)
  local _, _, e = current(s1, s2, s3)
  return e
end
-- #include state.lua
