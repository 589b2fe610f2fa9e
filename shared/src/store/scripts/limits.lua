-- Redis Cluster only: check and count an owner's limits before create.lua runs (the owner's
-- keys share the tag {OWNER}, another slot than the task's). Standalone, create.lua does
-- this in its own step. A create that then fails is taken back by Store::create_task
-- (best effort; a gateway dying in between leaves one count for the minute, and an id in
-- the unfinished set that prune_active drops because no such task exists).
-- KEYS[1] the owner's creation counter for this minute   KEYS[2] the owner's unfinished tasks
-- ARGV[1] task id  ARGV[2] ttl ms ('' = never expires)
-- ARGV[3] tasks per minute allowed (0: no limit)  ARGV[4] unfinished tasks allowed (0: none)
-- Returns: {'ok'} | {'limit', 'rate' | 'active'}
local rate, active = tonumber(ARGV[3]), tonumber(ARGV[4])
if rate > 0 and tonumber(redis.call('GET', KEYS[1]) or '0') >= rate then
  return {'limit', 'rate'}
end
if active > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms())
  if redis.call('ZCARD', KEYS[2]) >= active then return {'limit', 'active'} end
end
if rate > 0 and redis.call('INCR', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], 61000)
end
if active > 0 then
  if ARGV[2] == '' then
    redis.call('ZADD', KEYS[2], '+inf', ARGV[1])
    redis.call('PERSIST', KEYS[2])
  else
    redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[2]), ARGV[1])
    local left = redis.call('PTTL', KEYS[2])
    if left >= 0 and left < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]))
    end
  end
end
return {'ok'}
