-- The clocks, for every script that takes a prelude (store::scripts prepends the sections
-- a script names, in this order: clock, task, requeue, limits; after a line setting
-- PUBLISH and NUMSUB, which task.lua reads).
-- Redis' clock in ms, read once per script (TIME is a command like any other).
local NOW = nil
local function now_ms()
  if not NOW then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return NOW
end

-- A caller's clock (ms) for timestamps, when the script was given one: a worker's clock
-- stamps lastUpdatedAt without a TIME command. TTL decisions still read Redis' clock.
local STAMP = nil
local function stamp_ms()
  return STAMP or now_ms()
end

-- The caller's clock as it was given (decimal digits), when it was: lastUpdatedAt is
-- written from it as text, without a number conversion (a strtod) and a format back.
local STAMP_TEXT = nil

-- The later of two times in ms written as decimal digits (no sign, no leading zeros, as
-- every time these scripts store is written): the longer, else the greater as text.
local function later_text(a, b)
  if #a ~= #b then
    if #a > #b then return a end
    return b
  end
  if a > b then return a end
  return b
end
