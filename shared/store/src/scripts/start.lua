-- A worker took a job: take the task's fencing token, or skip a job that needs no run.
-- KEYS[1] task hash   KEYS[2] queue stream
-- ARGV[1] channel  ARGV[2] group  ARGV[3] entry id  ARGV[4] worker name
-- ARGV[5] most deliveries: the fence counts starts, so a job whose runs keep being
--         interrupted (its worker dies) ends failed instead of looping forever.
-- ARGV[6] the JSON-RPC error code it then fails with
-- ARGV[7] the worker's clock (ms): only when it says the TTL has passed is Redis' clock
--         read (TIME) to confirm, so the usual path needs no TIME and a worker clock ahead
--         of Redis' fails nothing early.
-- Returns: {'run', fence, deadline ms ('' = none)} | {'skip', reason}  (skipped entries are acknowledged and deleted)
-- The usual path is one HMGET and one HSET: starting is not an observable change.
local st = redis.call('HMGET', KEYS[1], 'status', 'cancel', 'updated', 'created', 'ttl', 'handovers', 'fence', 'retries', 'held')
if not st[1] then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'skip', 'gone'}
end
if is_terminal(st[1]) then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'skip', st[1]}
end
if st[5] and st[5] ~= '' and tonumber(ARGV[7]) >= tonumber(st[4]) + tonumber(st[5])
    and past_ttl(st[4], st[5]) then
  expire(KEYS[1], ARGV[1], st[4], st[5], st[3])
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'skip', 'expired'}
end
if st[2] == '1' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'msg', 'Cancelled by request')
  touch(KEYS[1], st[3])
  publish(KEYS[1], ARGV[1])
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'skip', 'cancelled'}
end
local fence = (tonumber(st[7] or '0') or 0) + 1
local most = tonumber(ARGV[5])
-- Runs handed over at a graceful shutdown were not interrupted: they do not count.
-- Nor do runs a tool asked to try again (retry.lua).
local handovers = (tonumber(st[6] or '0') or 0) + (tonumber(st[8] or '0') or 0)
if fence - handovers > most then
  local runs = fence - 1 - handovers
  local message = 'The work was interrupted ' .. runs .. ' times (its worker stopped each time); giving up'
  redis.call('HSET', KEYS[1], 'status', 'failed', 'msg', message, 'pending', 0, 'fence', fence,
    'error', cjson.encode({code = tonumber(ARGV[6]), message = message}))
  touch(KEYS[1], st[3])
  publish(KEYS[1], ARGV[1])
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'skip', 'interrupted'}
end
if st[9] == '1' then
  -- Back from a retry's wait or a strike's hold: running again.
  redis.call('HSET', KEYS[1], 'fence', fence, 'worker', ARGV[4], 'held', '0')
else
  redis.call('HSET', KEYS[1], 'fence', fence, 'worker', ARGV[4])
end
if fence > 1 then
  -- A run again: tell any earlier run still going that it has been superseded.
  publish(KEYS[1], ARGV[1])
end
local deadline = ''
if st[5] and st[5] ~= '' then deadline = string.format('%d', tonumber(st[4]) + tonumber(st[5])) end
return {'run', tostring(fence), deadline}
