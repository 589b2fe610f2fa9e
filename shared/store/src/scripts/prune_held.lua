-- Drop the held jobs whose task's TTL has ended (hold.lua recorded when): their tasks are
-- gone, and a restore would only queue them to be skipped.
-- KEYS[1] held hash   KEYS[2] held jobs' ends (zset, same hash tag)
-- ARGV[1] at most this many in one call
-- Returns how many were dropped.
local now = now_ms()
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #gone > 0 then
  redis.call('HDEL', KEYS[1], unpack(gone))
  redis.call('ZREM', KEYS[2], unpack(gone))
end
return #gone
