-- Set the status message of a running task.
-- KEYS[1] task hash
-- ARGV[1] channel  ARGV[2] fence  ARGV[3] message
-- Returns: {'ok'} | {'gone'} | {'fenced'} | {'terminal'}
-- The usual path: HGETALL, TIME, HSET, PUBLISH (on one Redis: PUBSUB NUMSUB, and PUBLISH
-- when watched).
local task = load(KEYS[1])
if not task then return {'gone'} end
if is_terminal(task.status) then return {'terminal'} end
if past_ttl(task.created, task.ttl) then
  expire(KEYS[1], ARGV[1], task.created, task.ttl, task.updated)
  return {'terminal'}
end
if task.fence ~= ARGV[2] then return {'fenced'} end
if task.msg == ARGV[3] then return {'ok'} end
commit(KEYS[1], ARGV[1], task, {msg = ARGV[3]}, true)
return {'ok'}
