-- batch: several requests in one call, FCALL <library>_batch: a host's
-- concurrent requests for one Redis master in one command rather than one
-- each, since what Redis spends per command (reading and looking it up,
-- entering Lua, writing its reply) is most of what a decision costs it.
-- Each request is decided by its algorithm's run, exactly as its own
-- function decides it alone, and gets its own reply or its own error.
--
-- KEYS[1]  the first request's key: it names the call's slot, which routes
--          the call to its master
-- ARGV     records, in order: the parameters of the requests that follow,
--          0, their number and the parameters (ARGV[3..] of their function,
--          sent once for the requests in a row of a limit); and for each
--          request, its algorithm (the place of its block in the library,
--          from 1), its key, the number of its arguments and its arguments:
--          its function's ARGV without the parameters, which go after the
--          first two (the op and the cost)
--
-- Reply: an array of one reply per request, in order: its function's
-- reply, or an error.
--
-- The keys of one call may lie in several slots (the function's flag
-- allow-cross-slot-keys), all served by the master that runs it. Redis
-- refuses a command on a key of a slot it does not serve (moved, or
-- migrating and not here) with the error "Script attempted to access a
-- non local key", before the command runs: a request's first command reads
-- its key, so a request refused that way has changed nothing, and the
-- caller sends it again on its own (which follows the redirection).
--
-- The requests are decided at one time, Redis's TIME when the call began
-- (batch_time, its seconds and ns as numbers, which clock.lua reads instead
-- of TIME while it is set): one atomic call, one moment.
local function requests(argv)
  local out, i, last = {}, 1, #argv
  -- a is each request's ARGV in turn, one table: its op and cost, the
  -- parameters (kept from their record to the next) and its other
  -- arguments; len is how many it holds.
  local a, np, len, keys = {}, 0, 0, {}
  while i <= last do
    local at = tonumber(argv[i])
    if at == 0 then
      np = tonumber(argv[i + 1])
      for j = 1, np do a[2 + j] = argv[i + 1 + j] end
      for j = 3 + np, len do a[j] = nil end
      len = 2 + np
      i = i + 2 + np
    else
      local run, k = runs[at], tonumber(argv[i + 2])
      if not run or not k or k < 2 or i + 2 + k > last then
        error("request " .. (#out + 1) .. " names no algorithm, or lacks its arguments")
      end
      keys[1], a[1], a[2] = argv[i + 1], argv[i + 3], argv[i + 4]
      for j = 3, k do a[np + j] = argv[i + 2 + j] end
      for j = np + k + 1, len do a[j] = nil end
      len = np + k
      local ok, v = pcall(run, keys, a)
      if not ok and type(v) ~= "table" then v = redis.error_reply(tostring(v)) end
      out[#out + 1] = v
      i = i + 3 + k
    end
  end
  return out
end

local function batch(keys, argv)
  local t = redis.call("TIME")
  batch_time = {tonumber(t[1]), tonumber(t[2]) * 1000}
  local ok, out = pcall(requests, argv)
  batch_time = nil -- whatever happened: the next call reads its own time
  if not ok then
    if type(out) == "table" then return out end
    return redis.error_reply("ERR sluice: a malformed batch: " .. tostring(out))
  end
  return out
end
