-- GCRA with redis-cell's parameters (max_burst, count per period), as a
-- Redis script: the comparison's stand-in for what users run in Redis today.
--
-- KEYS[1]  the bucket
-- ARGV     max_burst, count, period (ms), quantity
-- returns  {allowed (1 or 0), remaining}
--
-- The bucket is one string: its theoretical arrival time (TAT), in
-- microseconds. Time is the server's (TIME). The key expires when the TAT
-- passes, when the bucket is full again.
local burst = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local period = tonumber(ARGV[3]) * 1000
local quantity = tonumber(ARGV[4])

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]

local emission = period / count
local tolerance = emission * (burst + 1)
local increment = emission * quantity

local tat = tonumber(redis.call('GET', KEYS[1]))
if tat == nil or tat < now then
  tat = now
end

local new_tat = tat + increment
local allow_at = new_tat - tolerance
if now < allow_at then
  local remaining = math.floor((now - (tat - tolerance)) / emission)
  if remaining < 0 then remaining = 0 end
  return {0, remaining}
end

local ttl = math.ceil((new_tat - now) / 1000)
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.max(ttl, 1))
local remaining = math.floor((now - allow_at) / emission)
return {1, remaining}
