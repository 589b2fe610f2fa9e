-- A process' tally for the console's charts, and the tallies of processes gone: a process
-- that stopped writing for TALLY_STALE_MS is dropped by whichever process writes next, so
-- the hash holds the live fleet whether or not a console runs. Scored by Redis' clock, so
-- the processes' clocks need not agree.
-- KEYS[1] tallies hash (process -> JSON)   KEYS[2] sorted set (process -> last write ms)
-- ARGV[1] process   ARGV[2] tally JSON   ARGV[3] stale after (ms)
local now = now_ms()
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now, ARGV[1])
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]), 'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('HDEL', KEYS[1], unpack(gone))
  redis.call('ZREM', KEYS[2], unpack(gone))
end
return #gone
