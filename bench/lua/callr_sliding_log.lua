-- A rolling-window limiter on a sorted set, CALLR's design, as a Redis
-- script: the comparison's stand-in for what users of sliding_log run in
-- Redis today.
--
-- KEYS[1]  the bucket
-- ARGV     limit, window (ms), cost
-- returns  {allowed (1 or 0), requests left in the window}
--
-- Each admission is a member of the set scored by its time (ms, with the
-- microseconds as a fraction). A decision first removes the members older
-- than the window (ZREMRANGEBYSCORE), counts the rest (ZCARD), adds the
-- admissions (ZADD) and sets the key to expire with the window.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count + cost > limit then
  return {0, limit - count}
end
for i = 1, cost do
  -- Members must differ: the time and the position in the window.
  redis.call('ZADD', KEYS[1], now, t[1] .. t[2] .. ':' .. (count + i))
end
redis.call('PEXPIRE', KEYS[1], math.ceil(window))
return {1, limit - count - cost}
