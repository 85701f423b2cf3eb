-- token_bucket: package bucket's token bucket, with its Strict and Smyte
-- flags, on one bucket in Redis (state.lua is the request: the key, the op,
-- the reply).
--
-- ARGV[3..6]  max, refill_time ns, refill_amount, flags (1 strict, 2 smyte)
-- State: tokens, refill clock (a time), 0.
-- #include clock.lua

local max_tokens, refill_time, refill_amount, strict, smyte -- the request's, set by params

local p3, p4, p5, p6 -- the parameters' text, as last read

local function params(argv)
  if argv[3] == p3 and argv[4] == p4 and argv[5] == p5 and argv[6] == p6 then return end
  max_tokens, refill_time, refill_amount = tonumber(argv[3]), tonumber(argv[4]), tonumber(argv[5])
  local flags = tonumber(argv[6])
  strict, smyte = fmod(flags, 2) == 1, fmod(flags, 4) >= 2
  p3, p4, p5, p6 = argv[3], argv[4], argv[5], argv[6]
end

local function decode(raw)
  local tokens, t = string.match(raw, "^(%d+) (%d+) 0$")
  if tokens then return tonumber(tokens), offset(t), 0 end
end

local function encode(tokens, clock)
  local s, r = split(clock)
  if s > 0 then return string.format("%d %d%09d 0", tokens, s, r) end -- one format: the usual case
  return string.format("%d %s 0", tokens, absolute(clock))
end

local function init()
  return max_tokens, 0, 0
end

-- full_at returns when a bucket of amount tokens refilled at at is full.
local function full_at(amount, at)
  if amount >= max_tokens then return NEG end
  return at + ceildiv(max_tokens - amount, refill_amount) * refill_time
end

local function fresh_at(tokens, clock)
  return full_at(clamp(tokens, 0, max_tokens), clock)
end

-- refill returns the tokens now and the refill clock.
local function refill(tokens, clock)
  local amount = clamp(tokens, 0, max_tokens)
  local elapsed = -clock
  if elapsed < refill_time then return amount, clock end
  local refills = idiv(elapsed, refill_time)
  return math.min(max_tokens, refills * refill_amount + amount), clock + refills * refill_time
end

local function decide(n, tokens, clock)
  local adjusted, at = refill(tokens, clock)
  local allowed = adjusted >= n
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
  if write then tokens, clock = amount, at end
  local remaining, retry = amount, -1
  if smyte then remaining = adjusted end
  if not allowed and n <= max_tokens then
    retry = math.max(at + ceildiv(n - amount, refill_amount) * refill_time, 1)
  end
  return allowed and 1 or 0, remaining, retry, math.max(full_at(amount, at), 0), 0, tokens, clock, 0
end

local function refund(n, tokens, clock)
  if n > 0 then
    local adjusted, at = refill(tokens, clock)
    if adjusted < max_tokens then return math.min(max_tokens, adjusted + n), at, 0 end
  end
  return tokens, clock, 0
end

local lease_end = nil
-- #include state.lua
