-- A worker ends a task: terminal state, result or error, publish, XACK + XDEL.
-- A worker whose fencing token is stale writes nothing (another worker owns the task).
-- KEYS[1] task hash   KEYS[2] queue stream
-- ARGV[1] channel  ARGV[2] group  ARGV[3] entry id  ARGV[4] fence
-- ARGV[5] status  ARGV[6] field ('result' | 'error' | '')  ARGV[7] payload JSON
-- ARGV[8] status message ('' = keep)
-- Returns: {'ok'} | {'gone'} | {'terminal', status} | {'fenced'}
local st = redis.call('HMGET', KEYS[1], 'status', 'fence', 'updated', 'created', 'ttl')
if not st[1] then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'gone'}
end
if is_terminal(st[1]) then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'terminal', st[1]}
end
if past_ttl(st[4], st[5]) then
  -- Work that ends after its TTL ends failed, whatever it produced.
  expire(KEYS[1], ARGV[1], st[4], st[5], st[3])
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'terminal', 'failed'}
end
if st[2] ~= ARGV[4] then return {'fenced'} end
redis.call('HSET', KEYS[1], 'status', ARGV[5], 'pending', 0)
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], ARGV[6], ARGV[7]) end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'msg', ARGV[8]) end
touch(KEYS[1], st[3])
publish(KEYS[1], ARGV[1])
ack(KEYS[2], ARGV[2], ARGV[3])
return {'ok'}
