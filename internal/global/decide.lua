-- Sluice global limits: one decision on one bucket, the algorithms of
-- package bucket transcribed to Lua (see docs/global.md and bucket/doc.go).
--
-- KEYS[1]  the bucket's key
-- ARGV[1]  op: "a" acquire (ARGV[6] = cost), "r" refund (ARGV[6] = amount),
--          or "l" lease (ARGV[6] = tokens wanted; ARGV[9..12] below)
-- ARGV[2]  algorithm: 1 token_bucket, 2 gcra, 3 fixed_window, 4 sliding_window, 5 pacer
-- ARGV[3..5] parameters, integers:
--            token_bucket   max, refill_time ns, refill_amount
--            gcra           T = period/count ns, limit = burst+1, 0
--            fixed_window   max, window ns, 0
--            sliding_window max, window ns, 0
--            pacer          I = ceil(period/count) ns, max_delay ns, 0
-- ARGV[6]  cost or amount, 0 <= n < 2^53
-- ARGV[7]  flags: 1 strict, 2 smyte (token_bucket only)
-- ARGV[8]  "" to read the clock with TIME, or an explicit time, Unix ns
--          (tests only: the key then gets no expiry)
-- ARGV[9..12], lease only: the tokens needed (the request that wants the
--          lease: none are taken unless this many can be), tokens returned
--          from the previous lease, that lease's "until" (its tokens are
--          returned only up to then), and the lease's longest life, ns.
--
-- Reply: {allowed 0|1, remaining, retry_after ns, reset_after ns, delay ns}
-- Lease reply: {tokens granted, remaining, retry_after ns (for the tokens
--          needed), reset_after ns, valid_for ns, until}: the lease is
--          valid for valid_for ns from now (a window algorithm's lease ends
--          with the window), that is until the Unix ns "until" (a string).
--
-- Numbers in Lua are doubles, exact for integers below 2^53. Unix ns are
-- larger than that, so every time inside the script is an offset from now,
-- in ns (now is 0): the caller validated the limit so that every derived
-- duration is at most 2^52 ns, and every offset the script computes stays
-- within +-LIM. A stored time is an absolute Unix ns in decimal, converted
-- on read and on write. Products that could pass 2^53 (the sliding
-- window's weighted counts) are computed exactly with 24-bit limbs.
--
-- State, stored as "w0 w1 w2" (times absolute): token_bucket tokens, refill
-- clock; gcra tat; fixed_window window start, count; sliding_window window
-- start, previous count, current count; pacer next free slot. A bucket
-- that is fresh at now (back to the state of a new bucket) is read as a new
-- bucket; the key expires when the bucket becomes fresh.

if redis.replicate_commands then redis.replicate_commands() end

local LIM = 9007199254740991 - 4294967296 -- offsets are clamped to [-LIM, LIM]
local TWO53 = 9007199254740992
local E9 = 1000000000
local fmod, floor = math.fmod, math.floor

local op, alg = ARGV[1], tonumber(ARGV[2])
local p1, p2 = tonumber(ARGV[3]), tonumber(ARGV[4])
local cost = tonumber(ARGV[6])
local flags = tonumber(ARGV[7])
local strict, smyte = fmod(flags, 2) == 1, fmod(floor(flags / 2), 2) == 1

-- now, as whole seconds and ns within the second.
local now_s, now_ns
if ARGV[8] == "" then
  local t = redis.call("TIME")
  now_s, now_ns = tonumber(t[1]), tonumber(t[2]) * 1000
else
  local a = ARGV[8]
  if #a <= 9 then
    now_s, now_ns = 0, tonumber(a)
  else
    now_s, now_ns = tonumber(string.sub(a, 1, -10)), tonumber(string.sub(a, -9))
  end
end

-- Integer helpers, exact for operands below 2^53.
-- helpers begin

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

-- limbs returns the exact product a*b (a, b >= 0, below 2^53) as six
-- 24-bit limbs, least significant first.
local B = 16777216 -- 2^24
local function limbs(a, b)
  local a0, b0 = fmod(a, B), fmod(b, B)
  local a1, b1 = fmod((a - a0) / B, B), fmod((b - b0) / B, B)
  local a2, b2 = (a - a0 - a1 * B) / B / B, (b - b0 - b1 * B) / B / B
  local p = {a0 * b0, a0 * b1 + a1 * b0, a0 * b2 + a1 * b1 + a2 * b0, a1 * b2 + a2 * b1, a2 * b2, 0}
  local carry = 0
  for k = 1, 6 do
    local v = p[k] + carry
    local l = fmod(v, B)
    p[k], carry = l, (v - l) / B
  end
  return p
end

-- mulle reports whether a*b <= c*d exactly.
local function mulle(a, b, c, d)
  local x, y = a * b, c * d
  if x < TWO53 and y < TWO53 then return x <= y end -- both exact
  if x < TWO53 then return true end                 -- c*d >= 2^53 > a*b
  if y < TWO53 then return false end
  local p, q = limbs(a, b), limbs(c, d)
  for k = 6, 1, -1 do
    if p[k] ~= q[k] then return p[k] < q[k] end
  end
  return true
end

-- muldiv returns floor(a*b/c), a, b >= 0, 1 <= c <= 2^52, saturated at
-- 2^53.
local function muldiv(a, b, c)
  local x = a * b
  if x < TWO53 then return idiv(x, c) end
  local p = limbs(a, b)
  local q, r = 0, 0
  for k = 6, 1, -1 do
    local l = p[k]
    local bit = 8388608 -- 2^23
    while bit >= 1 do
      r = r * 2
      if l >= bit then l, r = l - bit, r + 1 end
      q = q * 2
      if r >= c then r, q = r - c, q + 1 end
      if q > TWO53 then q = TWO53 end
      bit = bit / 2
    end
  end
  return q
end

-- helpers end

-- Times: offsets from now, in ns.

-- offset converts a stored absolute time (decimal Unix ns) to an offset.
local function offset(str)
  local s, ns
  if #str <= 9 then
    s, ns = 0, tonumber(str)
  else
    s, ns = tonumber(string.sub(str, 1, -10)), tonumber(string.sub(str, -9))
  end
  if s == nil or ns == nil then return nil end
  local ds = s - now_s
  if ds > 9000000 then return LIM end
  if ds < -9000000 then return -LIM end
  return clamp(ds * E9 + (ns - now_ns), -LIM, LIM)
end

-- absolute formats an offset as decimal Unix ns (never before 0).
local function absolute(off)
  local total = now_ns + off
  local r = fmod(total, E9)
  if r < 0 then r = r + E9 end
  local s = now_s + (total - r) / E9
  if s < 0 then return "0" end
  if s == 0 then return string.format("%d", r) end
  return string.format("%d%09d", s, r)
end

-- nowmod returns now mod w for 1 <= w <= 2^52: ((now_s mod w) * 1e9 +
-- now_ns) mod w, the product by doubling so every value stays below 2^53.
local function nowmod(w)
  local a, m = fmod(now_s, w), 0
  local bit = 536870912 -- 2^29, the top bit of 1e9
  local e = E9
  while bit >= 1 do
    m = m * 2
    if m >= w then m = m - w end
    if e >= bit then
      e = e - bit
      m = m + a
      if m >= w then m = m - w end
    end
    bit = bit / 2
  end
  return fmod(m + now_ns, w)
end

-- The bucket: state words s[1..3] (times as offsets), per algorithm.

local TB, GCRA, FW, SW, PACER = 1, 2, 3, 4, 5
local time_words = {[TB] = {false, true, false}, [GCRA] = {true, false, false},
  [FW] = {true, false, false}, [SW] = {true, false, false}, [PACER] = {true, false, false}}

local NEG = -TWO53 * 4 -- "fresh at any time" (math.MinInt64 in package bucket)

-- token_bucket: max = p1, refill_time = p2, refill_amount = ARGV[5]
local p3 = tonumber(ARGV[5])

local function fullAt(amount, at)
  if amount >= p1 then return NEG end
  return at + ceildiv(p1 - amount, p3) * p2
end

local function refill(s)
  local amount, last = clamp(s[1], 0, p1), s[2]
  local elapsed = -last
  if elapsed < p2 then return amount, last end
  local refills = idiv(elapsed, p2)
  return math.min(p1, refills * p3 + amount), last + refills * p2
end

-- window start for fixed and sliding windows: window = p2
local function windowStart()
  return -nowmod(p2)
end

local function fixedWindow(s)
  local start = windowStart()
  if s[1] >= start then return s[1], math.max(s[2], 0) end
  return start, 0
end

local function slidingWindow(s)
  local start = windowStart()
  local stored, p, c = s[1], math.max(s[2], 0), math.max(s[3], 0)
  local prev, curr = 0, 0
  if stored >= start then
    start, prev, curr = stored, p, c
  elseif start - stored <= p2 then
    prev = c
  end
  return start, prev, curr, math.max(-start, 0)
end

local function slidingFreshAt(start, prev, curr)
  if curr > 0 then return start + 2 * p2 end
  if prev > 0 then return start + p2 end
  return NEG
end

local function pacerRemaining(delay)
  if delay > p2 then return 0 end
  return idiv(p2 - delay, p1) + 1
end

local function freshAt(s)
  if alg == TB then
    return fullAt(clamp(s[1], 0, p1), s[2])
  elseif alg == GCRA or alg == PACER then
    return s[1]
  elseif alg == FW then
    if s[2] <= 0 then return NEG end
    return s[1] + p2
  end
  return slidingFreshAt(s[1], math.max(s[2], 0), math.max(s[3], 0))
end

local function init(s)
  if alg == TB then
    s[1], s[2], s[3] = p1, 0, 0
  elseif alg == FW or alg == SW then
    s[1], s[2], s[3] = windowStart(), 0, 0
  else
    s[1], s[2], s[3] = 0, 0, 0
  end
end

-- decide applies a request of cost n to s and returns the decision
-- {allowed, remaining, retry_after, reset_after, delay}.
local function decide(s, n)
  local allowed, remaining, retry, reset, delay = false, 0, -1, 0, 0
  if alg == TB then
    local adjusted, at = refill(s)
    allowed = adjusted >= n
    local amount, write = adjusted, false
    if n == 0 then
    elseif smyte then
      amount, write = math.max(adjusted - n, 0), true
      if strict and amount == 0 then at = math.max(at, 0) end
    elseif allowed then
      amount, write = adjusted - n, true
      if strict and amount == 0 then at = math.max(at, 0) end
    elseif strict then
      at, write = math.max(at, 0), true
    end
    if write then s[1], s[2] = amount, at end
    remaining = amount
    if smyte then remaining = adjusted end
    if not allowed and n <= p1 then
      retry = math.max(at + ceildiv(n - amount, p3) * p2, 1)
    end
    reset = math.max(fullAt(amount, at), 0)
  elseif alg == GCRA then
    local t, limit = p1, p2
    local tau = limit * t
    local ttl = math.max(s[1], 0)
    if n <= limit then
      local inc = n * t
      if ttl > tau - inc then
        retry = ttl - (tau - inc)
      else
        allowed = true
        if n > 0 then
          ttl = ttl + inc
          s[1] = ttl
        end
      end
    end
    remaining = idiv(math.max(tau - ttl, 0), t)
    reset = math.max(s[1], 0)
  elseif alg == FW then
    local start, count = fixedWindow(s)
    if n <= p1 - count then
      allowed = true
      if n > 0 then
        count = count + n
        s[1], s[2] = start, count
      end
    elseif n <= p1 then
      retry = math.max(start + p2, 1)
    end
    remaining = math.max(p1 - count, 0)
    if count > 0 then reset = math.max(start + p2, 0) end
  elseif alg == SW then
    local max, w = p1, p2
    local start, prev, curr, elapsed = slidingWindow(s)
    local function passesFrom(pv, cu)
      if n > max - cu then return 0, false end
      if pv == 0 then return 0, true end
      local q = muldiv(max - cu - n, w, pv)
      if q >= w then return 0, true end
      local e = w - q
      return e, e < w
    end
    if n <= max - curr and mulle(prev, w - elapsed, max - curr - n, w) then
      allowed = true
      if n > 0 then
        curr = curr + n
        s[1], s[2], s[3] = start, prev, curr
      end
    elseif n <= max then
      local at
      local e, ok = passesFrom(prev, curr)
      if ok then
        at = start + math.max(e, elapsed)
      else
        e, ok = passesFrom(curr, 0)
        if ok then at = start + w + e else at = start + 2 * w end
      end
      retry = math.max(at, 1)
    end
    -- floor(max - estimate) = max - curr - ceil(prev*(w-elapsed)/w)
    local weighted = prev - muldiv(prev, elapsed, w)
    remaining = math.max(max - curr - weighted, 0)
    reset = math.max(slidingFreshAt(start, prev, curr), 0)
  else -- PACER: I = p1, max_delay = p2
    local i = p1
    local next = s[1]
    local d = math.max(next, 0)
    local slot = math.max(next, 0)
    if d > p2 then
      retry = d - p2
    elseif n * i > LIM - slot then
      -- the slots would end past LIM: never allowed
    else
      allowed, delay = true, d
      if n > 0 then s[1] = slot + n * i end
    end
    local wait = math.max(s[1], 0)
    remaining = pacerRemaining(wait)
    reset = wait
  end
  return {allowed and 1 or 0, remaining, retry, reset, delay}
end

-- refund gives n tokens back to s.
local function refund(s, n)
  if n <= 0 then return end
  if alg == TB then
    local adjusted, at = refill(s)
    if adjusted < p1 then s[1], s[2] = math.min(p1, adjusted + n), at end
  elseif alg == GCRA or alg == PACER then
    if s[1] > 0 then s[1] = math.max(s[1] - n * p1, 0) end
  elseif alg == FW then
    local start, count = fixedWindow(s)
    if count > 0 then s[1], s[2] = start, count - math.min(n, count) end
  else
    local start, prev, curr = slidingWindow(s)
    if prev == 0 and curr == 0 then return end
    local fromCurr = math.min(n, curr)
    s[1], s[2], s[3] = start, prev - math.min(n - fromCurr, prev), curr - fromCurr
  end
end

-- Read the bucket.
local key = KEYS[1]
local s = {0, 0, 0}
local raw = redis.call("GET", key)
local fresh = true
if raw then
  local i = 1
  for w in string.gmatch(raw, "%S+") do
    if i > 3 then break end
    if time_words[alg][i] then s[i] = offset(w) else s[i] = tonumber(w) end
    if s[i] == nil then return redis.error_reply("ERR sluice: the bucket at " .. key .. " is malformed") end
    i = i + 1
  end
  if i ~= 4 then return redis.error_reply("ERR sluice: the bucket at " .. key .. " is malformed") end
  fresh = freshAt(s) <= 0
end
if fresh then init(s) end
local before = {s[1], s[2], s[3]}

local reply
if op == "a" then
  reply = decide(s, cost)
elseif op == "r" then
  refund(s, cost)
  reply = decide(s, 0)
else
  local need, ret, untilTime, life = tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11], tonumber(ARGV[12])
  -- A window's tokens go back only within the lease's window; tokens
  -- of a token bucket or gcra go back whenever they come (capped).
  if ret > 0 and (untilTime == "" or offset(untilTime) >= 0 or (alg ~= FW and alg ~= SW)) then refund(s, ret) end
  local peek = decide({s[1], s[2], s[3]}, 0)
  local granted = 0
  if peek[2] >= need then
    granted = math.min(cost, peek[2])
    reply = decide(s, granted)
  else
    reply = decide({s[1], s[2], s[3]}, need)
  end
  local valid = life
  if alg == FW then
    valid = math.min(life, fixedWindow(s) + p2)
  elseif alg == SW then
    valid = math.min(life, slidingWindow(s) + p2)
  end
  valid = math.max(valid, 0)
  reply = {granted, reply[2], reply[3], reply[4], valid, absolute(valid)}
end

-- Write it back if it changed, with an expiry at the time it becomes fresh
-- (at least 1 ms; none for an explicit time). A bucket left fresh is kept
-- that millisecond rather than deleted, so a request from a moment earlier
-- (time going backwards) still sees its state.
if s[1] ~= before[1] or s[2] ~= before[2] or s[3] ~= before[3] then
  local words = {}
  for i = 1, 3 do
    if time_words[alg][i] then words[i] = absolute(s[i]) else words[i] = string.format("%d", s[i]) end
  end
  local v = table.concat(words, " ")
  if ARGV[8] == "" then
    redis.call("SET", key, v, "PX", math.max(ceildiv(math.max(freshAt(s), 0), 1000000), 1))
  else
    redis.call("SET", key, v)
  end
end
return reply
