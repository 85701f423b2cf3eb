-- The request on a bucket of package bucket's State: one Redis string, the
-- three words in decimal separated by spaces, times absolute (Unix ns).
-- Included last by the script of each algorithm that keeps such a bucket,
-- which defines before it, with the state as three numbers s1, s2, s3
-- (times as offsets from now):
--
--   params(argv)        reads the limit's parameters, ARGV[3] on; returns
--                       nothing, or an error's text if the request cannot
--                       be decided (it is then refused, changing nothing)
--   decode(raw)         the state from the stored string; nothing if it is
--                       not one the script writes
--   encode(s1, s2, s3)  the stored string of a state
--   init()              a new bucket's state
--   fresh_at(s1, s2, s3)      when the bucket is back to a new one's state
--   decide(n, s1, s2, s3)     a request of n: allowed (1 or 0), remaining,
--                             retry_after, reset_after, delay, and the
--                             state after it
--   refund(n, s1, s2, s3)     the state after n tokens are given back
--   lease_end           nil; or, for a window algorithm, lease_end(s1, s2,
--                       s3): when the window ends, which ends a lease (its
--                       tokens go back only before then)
--
-- and this defines run(keys, argv), the request:
--
-- KEYS[1]  the bucket's key
-- ARGV[1]  the op (clock.lua)
-- ARGV[2]  cost (acquire), amount (refund), tokens wanted (lease), 0 <= n < 2^53
-- ARGV[3..]  the algorithm's parameters
-- lease only, four more, last: the tokens needed (the request that wants
--          the lease: none are taken unless this many can be), tokens
--          returned from the previous lease, that lease's "until" (its
--          tokens are returned only up to then; "" for none), and the
--          lease's longest life, ns.
--
-- Reply: {allowed 0|1, remaining, retry_after ns, reset_after ns, delay ns}
-- Lease reply: {tokens granted, remaining, retry_after ns (for the tokens
--          needed), reset_after ns, valid_for ns, until}: the lease is
--          valid for valid_for ns from now (a window algorithm's lease ends
--          with the window), that is until the Unix ns "until" (a string).
--
-- A bucket that is fresh at now (back to the state of a new bucket) is
-- read as a new bucket; the key expires when the bucket becomes fresh.

local function run(keys, argv)
  clock(argv[1])
  local perr = params(argv)
  if perr then return redis.error_reply(perr) end
  local key, n = keys[1], tonumber(argv[2])
  local s1, s2, s3
  local raw = redis.call("GET", key)
  local stored = raw ~= false and raw ~= nil
  if raw then
    s1, s2, s3 = decode(raw)
    if not s1 then return redis.error_reply("ERR sluice: the bucket at " .. key .. " is malformed") end
    if fresh_at(s1, s2, s3) <= 0 then raw = nil end
  end
  if not raw then s1, s2, s3 = init() end
  local t1, t2, t3 = s1, s2, s3

  local allowed, remaining, retry, reset, delay, reply
  if op == "a" then
    allowed, remaining, retry, reset, delay, s1, s2, s3 = decide(n, s1, s2, s3)
    reply = {allowed, remaining, retry, reset, delay}
  elseif op == "r" then
    s1, s2, s3 = refund(n, s1, s2, s3)
    allowed, remaining, retry, reset, delay = decide(0, s1, s2, s3) -- changes nothing
    reply = {allowed, remaining, retry, reset, delay}
  else
    local k = #argv
    local need, ret, until_time, life = tonumber(argv[k - 3]), tonumber(argv[k - 2]), argv[k - 1], tonumber(argv[k])
    -- A window's tokens go back only within the lease's window; tokens
    -- of a token bucket or gcra go back whenever they come (capped).
    if ret > 0 and (until_time == "" or not lease_end or offset(until_time) >= 0) then
      s1, s2, s3 = refund(ret, s1, s2, s3)
    end
    local _, available = decide(0, s1, s2, s3)
    local granted = 0
    if available >= need then
      granted = math.min(n, available)
      _, remaining, retry, reset, _, s1, s2, s3 = decide(granted, s1, s2, s3)
    else
      _, remaining, retry, reset = decide(need, s1, s2, s3)
    end
    local valid = life
    if lease_end then valid = math.min(life, lease_end(s1, s2, s3)) end
    valid = math.max(valid, 0)
    reply = {granted, remaining, retry, reset, valid, absolute(valid)}
  end

  -- Write it back if it changed, with an expiry no sooner than the time
  -- it becomes fresh (at least 1 ms; none at an explicit time): the key's
  -- own if that is later (clock.lua, expire). A bucket left fresh is kept
  -- that millisecond rather than deleted, so a request from a moment
  -- earlier (time going backwards) still sees its state.
  if s1 ~= t1 or s2 ~= t2 or s3 ~= t3 then
    if explicit then
      redis.call("SET", key, encode(s1, s2, s3))
    else
      local ms, set = expiry(fresh_at(s1, s2, s3))
      if stored and redis.call("PTTL", key) > ms then
        redis.call("SET", key, encode(s1, s2, s3), "KEEPTTL")
      else
        redis.call("SET", key, encode(s1, s2, s3), "PX", set)
      end
    end
  end
  return reply
end
