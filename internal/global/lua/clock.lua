-- The request's op and its time: Redis's clock (TIME), or an explicit time
-- for tests and replays; and the conversions between absolute times
-- (decimal Unix ns, as stored) and offsets from now (ns, now is 0).
--
-- ARGV[1]  the op: "a" acquire, "r" refund, "l" lease; followed, for tests
--          and replays only, by an explicit time in Unix ns
--          ("a1700000000000000123": the bucket then gets no expiry)
--
-- Unix ns are above 2^53, so every time inside a script is an offset from
-- now: the caller validated the limit so that every derived duration is at
-- most 2^52 ns, and every offset a script computes stays within +-LIM.
-- #include int.lua

local LIM = 9007199254740991 - 4294967296 -- offsets are clamped to [-LIM, LIM]
local NEG = -TWO53 * 4 -- "fresh at any time" (math.MinInt64 in package bucket)
local E9 = 1000000000

-- The request's op, whether its time is explicit, and now as whole seconds
-- and ns within the second: set by clock.
local op, explicit, now_s, now_ns

-- clock reads the op and the time of a request from arg (ARGV[1]). It is
-- the first thing each request does. (A function library cannot read the
-- standard libraries while Redis loads it, so they are bound here.)
local function clock(arg)
  if not fmod then -- once per library; every time for a script
    fmod = math.fmod
    if redis.replicate_commands then redis.replicate_commands() end -- Redis before 5: replicate effects
  end
  op, explicit, now_s, now_ns = arg, false, 0, 0
  if #arg == 1 then
    if batch_time then -- one TIME for a batch's requests (batch.lua), read once
      now_s, now_ns = batch_time[1], batch_time[2]
      return
    end
    local t = redis.call("TIME")
    now_s, now_ns = tonumber(t[1]), tonumber(t[2]) * 1000
    return
  end
  local a = string.sub(arg, 2)
  op, explicit = string.sub(arg, 1, 1), true
  if #a <= 9 then
    now_ns = tonumber(a)
  else
    now_s, now_ns = tonumber(string.sub(a, 1, -10)), tonumber(string.sub(a, -9))
  end
end

-- offset_sn converts an absolute time, s whole seconds and ns more, to an
-- offset.
local function offset_sn(s, ns)
  local ds = s - now_s
  if ds > 9000000 then return LIM end
  if ds < -9000000 then return -LIM end
  return clamp(ds * E9 + (ns - now_ns), -LIM, LIM)
end

-- offset converts a stored absolute time (decimal Unix ns) to an offset.
local function offset(str)
  if #str <= 9 then return offset_sn(0, tonumber(str)) end
  return offset_sn(tonumber(string.sub(str, 1, -10)), tonumber(string.sub(str, -9)))
end

-- split returns the absolute time of an offset as whole seconds and ns
-- (the seconds negative before 1970).
local function split(off)
  local total = now_ns + off
  local r = fmod(total, E9)
  if r < 0 then r = r + E9 end
  return now_s + (total - r) / E9, r
end

-- absolute formats an offset as decimal Unix ns (never before 0).
local function absolute(off)
  local s, r = split(off)
  if s < 0 then return "0" end
  if s == 0 then return string.format("%d", r) end
  return string.format("%d%09d", s, r)
end

-- expiry returns the least expiry, ms from now, of a key whose bucket is
-- fresh again at fresh (an offset; at least 1 ms); and the expiry to give
-- it when it has less: a quarter more, so that the requests that follow,
-- each moving fresh a little later, keep it (moving an expiry costs Redis
-- more than the rest of a decision: a key outlives its bucket's return to
-- fresh by at most a quarter of the time it had to go).
local function expiry(fresh)
  local ms = 1
  if fresh > 1000000 then ms = ceildiv(fresh, 1000000) end
  return ms, ms + idiv(ms, 4)
end

-- expire makes the expiry of a key written at now no sooner than when its
-- bucket is fresh again, fresh (an offset), or removes it at an explicit
-- time. PTTL is whole ms of a clock that may be a ms behind TIME's: an
-- expiry is kept only when more than one ms later than needed.
local function expire(key, fresh)
  if explicit then
    redis.call("PERSIST", key)
    return
  end
  local ms, set = expiry(fresh)
  if redis.call("PTTL", key) > ms then return end
  redis.call("PEXPIRE", key, set)
end
