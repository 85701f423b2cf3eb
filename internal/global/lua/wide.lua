-- Exact products of two integers below 2^53, which can pass 2^53: as six
-- 24-bit limbs, compared (mulle) or divided (muldiv).
-- #include int.lua

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
