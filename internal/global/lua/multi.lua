-- multi: several acquires decided together in one call, FCALL
-- <library>_multi: a MULTI of global limits (all or nothing), or a Redis
-- transaction of global rate-limit commands (each in order). Every key
-- must lie in one Cluster slot (the caller checks it), so that one master
-- decides them all in one atomic call.
--
-- KEYS[1]  the first item's key: it names the call's slot
-- ARGV[1]  the mode: "m", all or nothing (package engine's Multi: every
--          item is decided; if each is allowed, each consumes; if any is
--          denied, no bucket changes); "e", each in order (engine's Each:
--          each item is decided as it would be alone, in order, and keeps
--          what it changed); anything else decides nothing (a probe of
--          the shard: "a")
-- ARGV[2]  the number of items
-- ARGV     then for each item, in order: its algorithm (the place of its
--          block in the library, from 1), its key, the number of its
--          arguments, and its arguments (its function's ARGV, an acquire)
--
-- Reply: {allowed 0|1, reply of item 1, reply of item 2, ...}, each item's
-- reply its function's; allowed is 1 iff every item is allowed. An item
-- that fails fails the call, which then changes nothing.
--
-- Items may name one key more than once: later items see what earlier ones
-- did. All are decided at one time, Redis's TIME when the call began (one
-- TIME for every item, and for the batch the call is part of, if any).
--
-- How nothing changes: before any item runs, the value and the expiry of
-- each key are read (GET, PTTL); the items run, each its algorithm's own
-- code, the one code that decides a request alone; then, if the call must
-- change nothing (a denial in mode "m", or a failure), each key is put back
-- as it was read: the same value and expiry, or deleted if it did not
-- exist. A call is atomic: no other command sees the state in between.
-- Reading every key first also means that a key its master does not serve
-- (a slot that moved) fails the call before anything is written.
local function decide_items(mode, n, argv)
  local items, saved, order = {}, {}, {}
  local i = 3
  for k = 1, n do
    local run, key, c = runs[tonumber(argv[i])], argv[i + 1], tonumber(argv[i + 2])
    if not run or not key or not c then return redis.error_reply("ERR sluice: a malformed multi") end
    local a = {}
    for j = 1, c do a[j] = argv[i + 2 + j] end
    items[k] = {run, key, a}
    if saved[key] == nil then
      saved[key] = {redis.call("GET", key), redis.call("PTTL", key)}
      order[#order + 1] = key
    end
    i = i + 3 + c
  end
  local out, allowed, failed = {0}, 1, nil
  for k = 1, n do
    local it = items[k]
    local ok, v = pcall(it[1], {it[2]}, it[3])
    if not ok then
      if type(v) == "table" then failed = v else failed = redis.error_reply(tostring(v)) end
      break
    end
    if type(v) ~= "table" or v.err then
      failed = v
      break
    end
    if tonumber(v[1]) ~= 1 then allowed = 0 end
    out[k + 1] = v
  end
  if failed or (mode == "m" and allowed == 0) then
    for _, key in ipairs(order) do
      local raw, ttl = saved[key][1], saved[key][2]
      if redis.call("GET", key) ~= raw or redis.call("PTTL", key) ~= ttl then
        if not raw then
          redis.call("DEL", key)
        elseif ttl > 0 then
          redis.call("SET", key, raw, "PX", ttl)
        else
          redis.call("SET", key, raw)
        end
      end
    end
  end
  if failed then return failed end
  out[1] = allowed
  return out
end

local function multi(keys, argv)
  local mode, n = argv[1], tonumber(argv[2]) or 0
  if mode ~= "m" and mode ~= "e" then return {1} end
  local own = batch_time == nil
  if own then batch_time = redis.call("TIME") end
  local ok, out = pcall(decide_items, mode, n, argv)
  if own then batch_time = nil end -- whatever happened: the next call reads its own time
  if not ok then
    if type(out) == "table" then return out end
    return redis.error_reply("ERR sluice: a malformed multi: " .. tostring(out))
  end
  return out
end
