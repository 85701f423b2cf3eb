-- Times packed in 8 bytes, for the algorithms that keep many of them in one
-- string (sliding_log, concurrency): a time's ns within the second (bits
-- 0-29) and bits 32-33 of its Unix seconds (bits 30-31) in 4 bytes, then
-- the seconds' low 32 bits in 4 bytes, both big endian. 8 zero bytes are
-- time 0, that of a new bucket's entries.
-- #include clock.lua

local P30, P32 = 1073741824, 4294967296

-- u32 reads 4 bytes of str at p (1-based), big endian.
local function u32(str, p)
  local a, b, c, d = string.byte(str, p, p + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- be32 is v (0 <= v < 2^32) in 4 bytes, big endian.
local function be32(v)
  local d = fmod(v, 256)
  v = (v - d) / 256
  local c = fmod(v, 256)
  v = (v - c) / 256
  local b = fmod(v, 256)
  return string.char((v - b) / 256, b, c, d)
end

-- get_time returns the time packed in str at p, an offset; time 0 if str
-- ends before it.
local function get_time(str, p)
  if p + 7 > #str then return offset_sn(0, 0) end
  local hi, lo = u32(str, p), u32(str, p + 4)
  local ns = fmod(hi, P30)
  return offset_sn(lo + (hi - ns) / P30 * P32, ns)
end

-- put_time packs the time at offset off (before 1970: 0).
local function put_time(off)
  local s, ns = split(off)
  if s < 0 then s, ns = 0, 0 end
  local top = idiv(s, P32)
  return be32(ns + top * P30) .. be32(s - top * P32)
end
