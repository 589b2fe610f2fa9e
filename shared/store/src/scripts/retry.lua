-- Retry: a run failed in a way its tool may try again. The job leaves its stream for the
-- stream's delayed set, due `ARGV[5]` ms from now (Redis' clock), with its attempt number;
-- the task stays `working` with status message ARGV[6]. Durable: whichever worker moves due
-- jobs back (due.lua) runs it, whether or not this one lives.
-- KEYS[1] task hash   KEYS[2] queue stream   KEYS[3] delayed set (the stream's hash tag)
-- ARGV[1] channel  ARGV[2] group  ARGV[3] entry id  ARGV[4] fence  ARGV[5] delay ms
-- ARGV[6] status message  ARGV[7] the next attempt's number
-- Returns: {'ok'} | {'gone'} | {'terminal'} | {'fenced'}
local task = load(KEYS[1])
if not task then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'gone'}
end
if is_terminal(task.status) then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'terminal'}
end
if past_ttl(task.created, task.ttl) then
  expire(KEYS[1], ARGV[1], task.created, task.ttl, task.updated)
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'terminal'}
end
if task.fence ~= ARGV[4] then return {'fenced'} end
if task.cancel == '1' then
  commit(KEYS[1], ARGV[1], task, {status = 'cancelled', msg = 'Cancelled by request', pending = '0'}, true)
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'terminal'}
end
local this = redis.call('XRANGE', KEYS[2], ARGV[3], ARGV[3])
if #this == 0 then return {'gone'} end
local fields = requeue_fields(this[1][2], ARGV[3], 'attempt')
fields[#fields + 1] = 'attempt'
fields[#fields + 1] = ARGV[7]
redis.call('ZADD', KEYS[3], now_ms() + tonumber(ARGV[5]), cjson.encode(fields))
ack(KEYS[2], ARGV[2], ARGV[3])
-- 'retries' keeps retried runs out of the interrupted-runs count (start.lua); 'held' tells
-- cancel.lua that no worker runs it meanwhile.
commit(KEYS[1], ARGV[1], task, {msg = ARGV[6], held = '1',
  retries = tostring((tonumber(task.retries or '0') or 0) + 1)}, true)
return {'ok'}
