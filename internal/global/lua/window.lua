-- What the window algorithms share: their parameters and where the
-- current window starts.
--
-- ARGV[3..4]  max, the requests a window admits; window, ns
-- #include clock.lua

local limit_max, window -- the request's, set by params

local function params(argv)
  limit_max, window = tonumber(argv[3]), tonumber(argv[4])
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

-- window_start returns the start of the window now is in, an offset.
local function window_start()
  return -nowmod(window)
end
