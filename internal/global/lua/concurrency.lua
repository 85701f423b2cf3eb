-- concurrency: package bucket's concurrency leases (nginx limit_conn's
-- slots in flight) on one bucket in Redis: at most max leases held at
-- once, each until it is released or its expiry passes.
--
-- KEYS[1]  the bucket's key
-- ARGV[1]  the op (clock.lua): "c" take a lease, "x" release one; "a", "r"
--          and "p" (an acquire, a refund, a peek) only report the bucket
-- ARGV[2]  the lease's id, 8 bytes, big endian ("c": the caller's random
--          draw; 0 or an id an entry has already is replaced by the next
--          value that is neither, as package bucket does)
-- ARGV[3..4]  max (at most 1024), lease ns
-- Value: max entries of 16 bytes, entry i at byte 16i: the lease's expiry
-- (times.lua; 0 when released or never taken) and its id (8 bytes).
-- Entries past the string's end are 0. An entry is held iff its expiry is
-- after now.
-- Reply: {allowed, remaining (entries free), retry_after (until the first
--          held entry expires, if none is free), reset_after (until the
--          last expires), 0, and for "c" the lease's id (8 bytes; allowed
--          0: nothing), for "x" 1 if a held lease was released, else 0}
-- #include times.lua

local limit_max, lease_ns
local raw

local function expiry(i) return get_time(raw, 16 * i + 1) end

local function id_of(i)
  local p = 16 * i + 9
  if p + 7 > #raw then return "\0\0\0\0\0\0\0\0" end
  return string.sub(raw, p, p + 7)
end

-- is_zero reports whether entry i's expiry is 0 (released or never taken).
local function is_zero(i)
  local p = 16 * i + 1
  return p + 7 > #raw or string.sub(raw, p, p + 7) == "\0\0\0\0\0\0\0\0"
end

-- scan returns the number of free entries and the index of the first (nil
-- if none), the earliest expiry of a held entry and the latest expiry of
-- any entry that has one (NEG if none).
local function scan()
  local free, first, earliest, latest = 0, nil, nil, NEG
  for i = 0, limit_max - 1 do
    local e = expiry(i)
    if not is_zero(i) then latest = math.max(latest, e) end
    if e > 0 then
      if not earliest or e < earliest then earliest = e end
    else
      if not first then first = i end
      free = free + 1
    end
  end
  return free, first, earliest, latest
end

-- next_id returns id+1, wrapping.
local function next_id(id)
  local b = {string.byte(id, 1, 8)}
  for k = 8, 1, -1 do
    if b[k] < 255 then
      b[k] = b[k] + 1
      return string.char(unpack(b))
    end
    b[k] = 0
  end
  return string.char(unpack(b))
end

local function has_id(id)
  for i = 0, limit_max - 1 do
    if id_of(i) == id then return true end
  end
  return false
end

-- set_raw writes entry (16 bytes, or 8: the expiry) at entry i of raw.
local function set_raw(i, entry)
  if #raw < 16 * i then raw = raw .. string.rep("\0", 16 * i - #raw) end
  raw = string.sub(raw, 1, 16 * i) .. entry .. string.sub(raw, 16 * i + #entry + 1)
end

local function report()
  local free, _, earliest, latest = scan()
  local allowed, retry = 0, -1
  if free > 0 then allowed = 1 else retry = math.max(earliest, 1) end
  return {allowed, free, retry, math.max(latest, 0), 0}
end

local function run(keys, argv)
  clock(argv[1])
  limit_max, lease_ns = tonumber(argv[3]), tonumber(argv[4])
  local key, id = keys[1], argv[2]
  if (op == "c" or op == "x") and #id ~= 8 then return redis.error_reply("ERR sluice: a lease id is 8 bytes") end
  raw = redis.call("GET", key)
  local new = true
  if raw then
    if #raw % 16 ~= 0 or #raw > 16 * limit_max then
      return redis.error_reply("ERR sluice: the bucket at " .. key .. " is malformed")
    end
    local _, _, _, latest = scan()
    new = latest <= 0
  end
  if new then raw = "" end

  local reply, at, entry
  if op == "c" then
    local free, first, earliest, latest = scan()
    if free == 0 then
      reply = {0, 0, math.max(earliest, 1), math.max(latest, 0), 0, ""}
    else
      while id == "\0\0\0\0\0\0\0\0" or has_id(id) do id = next_id(id) end
      at, entry = first, put_time(lease_ns) .. id
      reply = {1, free - 1, -1, math.max(latest, lease_ns), 0, id}
    end
  elseif op == "x" then
    local released = 0
    if id ~= "\0\0\0\0\0\0\0\0" then
      for i = 0, limit_max - 1 do
        if id_of(i) == id and expiry(i) > 0 then
          at, entry, released = i, "\0\0\0\0\0\0\0\0", 1
          break
        end
      end
    end
    if at then set_raw(at, entry) end
    reply = report()
    reply[6] = released
  else
    reply = report()
  end

  if at then
    if new then
      redis.call("SET", key, string.rep("\0", 16 * at) .. entry)
    else
      redis.call("SETRANGE", key, 16 * at, entry)
    end
    if op == "c" then set_raw(at, entry) end
    local _, _, _, fresh = scan()
    expire(key, fresh)
  end
  return reply
end
