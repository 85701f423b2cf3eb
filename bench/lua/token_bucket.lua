-- Token bucket with smyte/ratelimit's discrete refill, as a Redis script:
-- the comparison's stand-in for what users run in Redis today.
--
-- KEYS[1]  the bucket
-- ARGV     max, refill_time (ms), refill_amount, cost
-- returns  {allowed (1 or 0), tokens left}
--
-- The bucket is a hash {v = tokens, t = last refill, ms}. Time is the
-- server's (TIME), as in the usual Redis rate-limiter scripts. The key
-- expires once it would be full again, so idle buckets cost no memory.
local max = tonumber(ARGV[1])
local refill_time = tonumber(ARGV[2])
local refill_amount = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local b = redis.call('HMGET', KEYS[1], 'v', 't')
local tokens = tonumber(b[1])
local last = tonumber(b[2])
if tokens == nil or last == nil then
  tokens = max
  last = now
end

local refills = math.floor((now - last) / refill_time)
if refills > 0 then
  tokens = math.min(max, tokens + refills * refill_amount)
  last = last + refills * refill_time
end

local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end

redis.call('HSET', KEYS[1], 'v', tokens, 't', last)
local missing = max - tokens
local ttl = math.ceil(missing / refill_amount) * refill_time
redis.call('PEXPIRE', KEYS[1], math.max(ttl, refill_time))
return {allowed, tokens}
