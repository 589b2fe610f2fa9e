-- Hold (or renew) one of an owner's notification-stream slots.
-- KEYS[1] the owner's open listeners (id scored by when its hold lapses)
-- ARGV[1] listener id  ARGV[2] most open at once (0: no limit)  ARGV[3] hold ms
-- Returns 1 when held, 0 when the owner already holds the limit. A gateway that dies
-- stops renewing, and its listeners lapse after the hold.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local most = tonumber(ARGV[2])
if most > 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1])
    and redis.call('ZCARD', KEYS[1]) >= most then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
