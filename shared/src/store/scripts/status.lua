-- Set the status message of a running task.
-- KEYS[1] task hash
-- ARGV[1] channel  ARGV[2] fence  ARGV[3] message
-- Returns: {'ok'} | {'gone'} | {'fenced'} | {'terminal'}
local st = redis.call('HMGET', KEYS[1], 'status', 'fence', 'msg', 'updated', 'created', 'ttl')
if not st[1] then return {'gone'} end
if is_terminal(st[1]) then return {'terminal'} end
if past_ttl(st[5], st[6]) then
  expire(KEYS[1], ARGV[1], st[5], st[6], st[4])
  return {'terminal'}
end
if st[2] ~= ARGV[2] then return {'fenced'} end
if st[3] == ARGV[3] then return {'ok'} end
redis.call('HSET', KEYS[1], 'msg', ARGV[3])
touch(KEYS[1], st[4])
publish(KEYS[1], ARGV[1])
return {'ok'}
