-- window_counters: package bucket's sub-window counters (Figma's sliding
-- window counters) on one bucket in Redis. Time is cut into sub-windows of
-- w = ceil(window/counters) ns, aligned to multiples of w since the Unix
-- epoch, each with a counter; a request sees the sum of every counter whose
-- sub-window overlaps (now-window, now]: harsh, never lenient. The ring of
-- counters+1 counters holds sub-window j at index j mod (counters+1).
--
-- ARGV[3..6]  max, window ns, counters (1 to 64), count_denied (1: a denied
--             request counts too)
-- Value: 8*(counters+2) bytes: the number of the newest stored sub-window
-- (floor(t/w) for its times t), then the counters+1 counters of the ring,
-- index 0 first, each an IEEE 754 double in 8 bytes, big endian (exact:
-- every word is an integer below 2^53). A decision rewrites only
-- the counters it changes (SETRANGE).
--
-- Ops and replies are state.lua's, and "p", a peek: allowed and retry_after
-- for a cost of 1, the rest for 0, changing nothing. A lease of k tokens
-- counts k in now's
-- sub-window, like an admission of k, and ends with that sub-window, so
-- that its tokens are counted where a local admission would count them;
-- its unused tokens go back (newest sub-window first) only before then.
-- A counter saturates at 2^53-1 (package bucket: 2^63-1), reached only by
-- denied requests of count_denied.
-- #include window.lua

local counters, count_denied, w, m
local top, c, cur, now_r -- the ring (c[1..m]), now's sub-window and now mod w
local dirty -- the indexes of c changed, and 0 if top did

-- A word is a double, 8 bytes big endian (struct): exact for the integers
-- below 2^53 it holds, and decoded by Redis's C code in one call.
local function b64(v)
  return struct.pack(">d", v)
end

-- word reports whether v is a word a bucket may hold: an integer in
-- [0, 2^53).
local function word(v)
  return v and v >= 0 and v < TWO53 and v == math.floor(v)
end

local function counter_params(argv)
  params(argv)
  counters, count_denied = tonumber(argv[5]), argv[6] == "1"
  w = ceildiv(window, counters)
  m = counters + 1
end

-- now_window returns floor(now/w) and r = now mod w (exact, nowmod). The
-- quotient (now-r)/w is an integer below 2^53, and now_s*1e9 is exact in a
-- double (1e9 = 2^9 * 1953125), so the double quotient is within 512/w
-- (w >= 15625 ns) of it: rounded, it is exact.
local function now_window()
  local r = nowmod(w)
  return math.floor((now_s * E9 - r + now_ns) / w + 0.5), r
end

-- ends returns when sub-window j stops counting, (j+1)*w + window, an
-- offset.
local function ends(j)
  return (j + 1 - cur) * w - now_r + window
end

local function index(j)
  local i = fmod(j, m)
  if i < 0 then i = i + m end
  return i + 1
end

local function down(i)
  if i == 1 then return m end
  return i - 1
end

-- span returns how many stored sub-windows, from top down, count at now:
-- those numbered floor((now-window)/w) or more.
local function span()
  local lo = cur - ceildiv(window - now_r, w)
  if top < lo then return 0 end
  return math.min(top - lo, counters) + 1
end

-- sum returns the sum of the counters that count, or max+1 once it is more.
local function sum()
  local s, i = 0, index(top)
  for _ = 1, span() do
    s = s + math.max(c[i], 0)
    if s > limit_max then return limit_max + 1 end
    i = down(i)
  end
  return s
end

-- fresh_at returns when no counter counts any more (NEG if none has a count).
local function fresh_at()
  local i = index(top)
  for k = 0, m - 1 do
    if c[i] > 0 then return ends(top - k) end
    i = down(i)
  end
  return NEG
end

-- report returns remaining, retry_after (for a request of n, denied or not)
-- and reset_after for the counters as they stand, whose sum is count.
local function report(allowed, count, n)
  local retry = -1
  if allowed == 0 and n <= limit_max then
    local room, s, i = limit_max - n, 0, index(top)
    for k = 0, span() - 1 do
      s = s + math.max(c[i], 0)
      if s > room then
        retry = math.max(ends(top - k), 1)
        break
      end
      i = down(i)
    end
  end
  return limit_max - math.min(count, limit_max), retry, math.max(fresh_at(), 0)
end

-- decide decides a request of n and, if it counts, counts it. It returns
-- allowed, remaining, retry_after, reset_after and whether it changed the
-- counters.
local function decide(n)
  local count = sum()
  local allowed = 0
  if count + n <= limit_max then allowed = 1 end
  local changed = false
  if n > 0 and (allowed == 1 or count_denied) then
    if cur > top then
      local i = index(top)
      for _ = 1, math.min(cur - top, m) do
        i = i + 1
        if i > m then i = 1 end
        if c[i] ~= 0 then c[i], dirty[i] = 0, true end
      end
      top, dirty[0] = cur, true
    end
    local i = index(top)
    c[i], dirty[i] = math.min(math.max(c[i], 0) + n, TWO53 - 1), true
    count = math.min(count + n, limit_max + 1)
    changed = true
  end
  local remaining, retry, reset = report(allowed, count, n)
  return allowed, remaining, retry, reset, changed
end

-- refund takes n off the counters that count, newest first.
local function refund(n)
  local changed, i = false, index(top)
  for _ = 1, span() do
    if n <= 0 then break end
    if c[i] > 0 then
      local take = math.min(c[i], n)
      c[i], n, changed, dirty[i] = c[i] - take, n - take, true, true
    end
    i = down(i)
  end
  return changed
end

-- encode is the stored value.
local function encode()
  local words = {b64(top)}
  for i = 1, m do words[i + 1] = b64(c[i]) end
  return table.concat(words)
end

local function run(keys, argv)
  clock(argv[1])
  counter_params(argv)
  local key, n = keys[1], tonumber(argv[2])
  cur, now_r = now_window()
  local raw = redis.call("GET", key)
  local new = true
  dirty = {}
  if raw then
    top, c = nil, {}
    if #raw == 8 * (m + 1) then
      c = {struct.unpack(string.rep(">d", m + 1), raw)}
      top = table.remove(c, 1)
      c[m + 1] = nil -- struct.unpack's next position
      if not word(top) then top = nil end
      for i = 1, m do if not word(c[i]) then top = nil end end
    end
    if not top then
      return redis.error_reply("ERR sluice: the bucket at " .. key .. " is malformed")
    end
    new = fresh_at() <= 0
  end
  if new then
    top, c = cur, {}
    for i = 1, m do c[i] = 0 end
  end

  local reply, changed
  if op == "a" then
    local allowed, remaining, retry, reset
    allowed, remaining, retry, reset, changed = decide(n)
    reply = {allowed, remaining, retry, reset, 0}
  elseif op == "p" then
    local count = sum()
    local allowed = 0
    if count + 1 <= limit_max then allowed = 1 end
    local remaining, retry, reset = report(allowed, count, 1)
    reply = {allowed, remaining, retry, reset, 0}
    changed = false
  elseif op == "r" then
    changed = n > 0 and refund(n)
    local allowed, remaining, retry, reset = decide(0)
    reply = {allowed, remaining, retry, reset, 0}
  else
    local k = #argv
    local need, ret, until_time, life = tonumber(argv[k - 3]), tonumber(argv[k - 2]), argv[k - 1], tonumber(argv[k])
    changed = false
    if ret > 0 and until_time ~= "" and offset(until_time) >= 0 then changed = refund(ret) end
    local available = limit_max - math.min(sum(), limit_max)
    local _, granted, remaining, retry, reset, took = nil, 0
    if available >= need then
      granted = math.min(n, available)
      _, remaining, retry, reset, took = decide(granted)
      changed = changed or took
    else
      -- A lease denied counts nothing: its retry_after is a denied
      -- request's (counted, with count_denied), on a copy.
      local saved_top, saved, saved_dirty = top, {unpack(c)}, {}
      for k, v in pairs(dirty) do saved_dirty[k] = v end
      _, remaining, retry, reset = decide(need)
      top, c, dirty = saved_top, saved, saved_dirty
    end
    local valid = math.max(math.min(life, w - now_r), 0)
    reply = {granted, remaining, retry, reset, valid, absolute(valid)}
  end

  if changed then
    if new then
      redis.call("SET", key, encode())
    else
      if dirty[0] then redis.call("SETRANGE", key, 0, b64(top)) end
      for i = 1, m do
        if dirty[i] then redis.call("SETRANGE", key, 8 * i, b64(c[i])) end
      end
    end
    expire(key, fresh_at())
  end
  return reply
end
