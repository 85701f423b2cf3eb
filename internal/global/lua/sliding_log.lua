-- sliding_log: package bucket's sliding log (CALLR's exact rolling window:
-- a request of n passes iff fewer than max-n+1 admissions are later than
-- now-window) on one bucket in Redis: the ring of the last max admission
-- times, as package bucket keeps it, in one string.
--
-- ARGV[3..4]  max (at most 4096), window ns (window.lua)
-- Value: 8 bytes of header, the ring's head (the index the next entry is
-- written to) and fill (the entries stored), 4 bytes each, big endian; then
-- entry i of the ring at byte 8+8i, 8 bytes: its time's ns within the
-- second and its Unix seconds (times.lua). Entries past the string's end
-- are 0 (a new ring's), so the string holds at most 8+8*max bytes. Entries
-- never decrease from the oldest to the newest: an admission is recorded
-- at max(now, newest).
--
-- Ops and replies are state.lua's, and "p", a peek: allowed and retry_after
-- for a cost of 1, the rest for 0, changing nothing. A lease of k tokens
-- records k entries,
-- like an admission of k; it is valid for at most a tenth of the window,
-- and its "until" is the time of its entries, not its end: its unused
-- tokens go back (the newest entries removed) only while they are the
-- newest entries and in the window, so a return never removes another
-- host's admission.
-- #include window.lua
-- #include times.lua

-- The ring: head and fill; raw holds the entries as stored, read relative
-- to base (the head raw was written with). The newest shift entries are
-- newer than raw: all at rec, an offset.
local raw, head, fill, base, shift, rec

-- at returns the k-th most recent entry, 1 <= k <= fill, an offset.
local function at(k)
  if k <= shift then return rec end
  local i = base - (k - shift)
  if i < 0 then i = i + limit_max end
  return get_time(raw, 9 + 8 * i)
end

local function live(e)
  return e > -window
end

-- live_count returns how many entries count at now: the most recent ones.
local function live_count()
  if fill == 0 or not live(at(1)) then return 0 end
  if live(at(fill)) then return fill end
  local lo, hi = 1, fill - 1
  while lo < hi do
    local mid = lo + idiv(hi - lo + 1, 2)
    if live(at(mid)) then lo = mid else hi = mid - 1 end
  end
  return lo
end

-- verdict returns whether a request of n passes, and if not when.
local function verdict(n)
  if n > limit_max then return 0, -1 end
  local k = limit_max - n + 1
  if k > fill then return 1, -1 end
  local e = at(k)
  if not live(e) then return 1, -1 end
  return 0, math.max(e + window, 1)
end

-- report returns remaining and reset_after for the ring as it stands.
local function report()
  local reset = 0
  if fill > 0 then reset = math.max(at(1) + window, 0) end
  return limit_max - live_count(), reset
end

-- admit records n entries (1 <= n <= max) at max(now, newest).
local function admit(n)
  local t = 0
  if fill > 0 then t = math.max(t, at(1)) end
  rec, shift = t, n
  head = fmod(head + n, limit_max)
  fill = math.min(fill + n, limit_max)
end

-- unadmit removes the newest k entries.
local function unadmit(k)
  head = head - k
  if head < 0 then head = head + limit_max end
  fill, base = fill - k, head
end

local function run(keys, argv)
  clock(argv[1])
  params(argv)
  local key, n = keys[1], tonumber(argv[2])
  raw, head, fill, shift, rec = redis.call("GET", key), 0, 0, 0, 0
  local new = true
  if raw then
    local words = (#raw - 8) / 8
    if #raw < 8 or words ~= math.floor(words) or words > limit_max then
      return redis.error_reply("ERR sluice: the bucket at " .. key .. " is malformed")
    end
    head, fill = u32(raw, 1), u32(raw, 5)
    if head >= limit_max or fill > limit_max then
      return redis.error_reply("ERR sluice: the bucket at " .. key .. " is malformed")
    end
    base = head
    new = fill == 0 or at(1) + window <= 0 -- fresh: a new ring
  end
  if new then raw, head, fill = "", 0, 0 end
  base = head
  local head0, fill0 = head, fill

  local reply
  if op == "a" then
    local allowed, retry = verdict(n)
    if allowed == 1 and n > 0 then admit(n) end
    local remaining, reset = report()
    reply = {allowed, remaining, retry, reset, 0}
  elseif op == "p" then
    local allowed, retry = verdict(1)
    local remaining, reset = report()
    reply = {allowed, remaining, retry, reset, 0}
  elseif op == "r" then
    local k = math.min(n, live_count())
    if k > 0 then unadmit(k) end
    local remaining, reset = report()
    reply = {1, remaining, -1, reset, 0}
  else
    local k = #argv
    local need, ret, until_time, life = tonumber(argv[k - 3]), tonumber(argv[k - 2]), argv[k - 1], tonumber(argv[k])
    if ret > 0 and until_time ~= "" then
      local t, c = offset(until_time), 0
      while c < ret and c < fill and at(c + 1) == t and live(t) do c = c + 1 end
      if c > 0 then unadmit(c) end
    end
    local remaining = limit_max - live_count()
    local granted, retry = 0, -1
    if remaining >= need then
      granted = math.min(n, remaining)
      if granted > 0 then admit(granted) end
    else
      retry = select(2, verdict(need))
    end
    local reset
    remaining, reset = report()
    local valid = math.max(math.min(life, idiv(window, 10)), 0)
    reply = {granted, remaining, retry, reset, valid, absolute(rec)}
  end

  if head ~= head0 or fill ~= fill0 or shift > 0 then
    local hdr = be32(head) .. be32(fill)
    if new then
      redis.call("SET", key, hdr .. string.rep(put_time(rec), shift))
    elseif shift > 0 and 8 + 8 * math.min(base + shift, limit_max) > #raw then
      -- The ring grows: written whole, so that Redis holds it at its size
      -- (SETRANGE would grow it by doubling).
      local e, m = put_time(rec), math.min(shift, limit_max - base)
      local v = hdr .. string.sub(raw, 9, 8 + 8 * base) .. string.rep(e, m)
      if shift > m then
        v = hdr .. string.rep(e, shift - m) .. string.sub(raw, 9 + 8 * (shift - m), 8 + 8 * base) .. string.rep(e, m)
      end
      redis.call("SET", key, v .. string.sub(raw, #v + 1))
    else
      if shift > 0 then
        local e, m = put_time(rec), math.min(shift, limit_max - base)
        redis.call("SETRANGE", key, 8 + 8 * base, string.rep(e, m))
        if shift > m then redis.call("SETRANGE", key, 8, string.rep(e, shift - m)) end
      end
      redis.call("SETRANGE", key, 0, hdr)
    end
    local fresh = NEG
    if fill > 0 then fresh = at(1) + window end
    expire(key, fresh)
  end
  return reply
end
