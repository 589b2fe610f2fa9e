-- tasks/cancel. A task no worker runs right now (queued, or parked waiting for input) ends
-- cancelled at once; a running one is flagged and its worker stops it (T-36, T-37).
-- Terminal tasks do not change.
-- KEYS[1] task hash   KEYS[2] its job's stream, when ARGV[4] is 'declared' (Redis Cluster,
--                    where a script touches only declared keys; the caller read it first)
-- ARGV[1] channel  ARGV[2] owner  ARGV[3] consumer group  ARGV[4] 'declared' | absent
-- Returns: {'ok'} | {'ok', tool} when this script ended the task | {'notfound'}
local st = redis.call('HMGET', KEYS[1], 'status', 'owner', 'fence', 'cancel', 'updated', 'created', 'ttl', 'tool', 'stream', 'entry', 'held')
if not st[1] or st[2] ~= ARGV[2] then return {'notfound'} end
if is_terminal(st[1]) then return {'ok'} end
if past_ttl(st[6], st[7]) then
  expire(KEYS[1], ARGV[1], st[6], st[7], st[5])
  return {'ok'}
end
-- A held job (kill switch, hold.lua) is not running either.
if not st[3] or st[1] == 'input_required' or st[11] == '1' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'msg', 'Cancelled by request', 'pending', 0)
  touch(KEYS[1], st[5])
  publish(KEYS[1], ARGV[1])
  -- The stream field never changes after create; a declared stream that is not it (or
  -- none) leaves the entry for the start script to skip.
  local stream = st[9]
  if ARGV[4] == 'declared' and KEYS[2] ~= st[9] then stream = nil end
  if not st[3] and stream and st[10] then
    -- Never started: take the job off its queue, so no worker runs it at all (a worker
    -- may run a young job before its start script; it would find nothing to read).
    redis.call('XACK', stream, ARGV[3], st[10])
    redis.call('XDEL', stream, st[10])
  end
  return {'ok', st[8] or ''}
elseif st[4] ~= '1' then
  -- Not an observable change (no version bump): only the worker acts on it.
  redis.call('HSET', KEYS[1], 'cancel', '1')
  publish(KEYS[1], ARGV[1])
end
return {'ok'}
