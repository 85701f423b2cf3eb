-- Sub-window counters in a hash, Figma's design, as a Redis script: the
-- comparison's stand-in for what users of window_counters run in Redis
-- today.
--
-- KEYS[1]  the bucket
-- ARGV     limit, window (ms), counters, cost, and optionally now (ms; the
--          server's TIME otherwise)
-- returns  {allowed (1 or 0), requests left in the window}
--
-- The hash holds a counter per sub-window of window/counters ms, its
-- field the sub-window's number. A decision sums the counters of the
-- sub-windows in the window (HGETALL), increments the current one
-- (HINCRBY) if the request fits, drops the fields older than the window
-- once there are more than counters of them, and sets the key to expire
-- with the window.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local counters = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end

local width = math.ceil(window / counters)
local current = math.floor(now / width)
local oldest = current - counters + 1

local fields = redis.call('HGETALL', KEYS[1])
local count, stale = 0, {}
for i = 1, #fields, 2 do
  local sub = tonumber(fields[i])
  if sub >= oldest then
    count = count + tonumber(fields[i + 1])
  else
    stale[#stale + 1] = fields[i]
  end
end
if #stale > 0 and #fields / 2 > counters then
  redis.call('HDEL', KEYS[1], unpack(stale))
end
if count + cost > limit then
  return {0, limit - count}
end
redis.call('HINCRBY', KEYS[1], current, cost)
redis.call('PEXPIRE', KEYS[1], window)
return {1, limit - count - cost}
