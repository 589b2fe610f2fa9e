-- Kill switch: hold a job of a struck tool instead of running it. The entry moves off the
-- stream into the stream's held hash (no worker slot, not lost), and the task stays
-- `working` with a status message naming the strike.
-- KEYS[1] task hash   KEYS[2] queue stream   KEYS[3] held hash (same hash tag as the stream)
-- KEYS[4] the held jobs' ends (zset: entry id -> when its task's TTL ends; same hash tag)
-- ARGV[1] channel  ARGV[2] group  ARGV[3] entry id  ARGV[4] status message
-- Returns 1 when held; 0 when the entry or the task needs no holding (gone, ended, past
-- its TTL, asked to cancel: the task ends as start.lua would end it; the entry is
-- acknowledged and deleted).
local this = redis.call('XRANGE', KEYS[2], ARGV[3], ARGV[3])
if #this == 0 then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return 0
end
local task = load(KEYS[1])
if not task or is_terminal(task.status) then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return 0
end
-- As start.lua: a task past its TTL ends expired, and one asked to cancel ends cancelled,
-- rather than waiting held for a restore.
if past_ttl(task.created, task.ttl) then
  expire(KEYS[1], ARGV[1], task.created, task.ttl, task.updated)
  ack(KEYS[2], ARGV[2], ARGV[3])
  return 0
end
if task.cancel == '1' then
  commit(KEYS[1], ARGV[1], task, {status = 'cancelled', msg = 'Cancelled by request', pending = '0'}, true)
  ack(KEYS[2], ARGV[2], ARGV[3])
  return 0
end
redis.call('HSET', KEYS[3], ARGV[3], cjson.encode(requeue_fields(this[1][2], ARGV[3], nil)))
-- When the task's TTL ends, prune_held.lua drops the held job (its task is gone by then).
if task.ttl and task.ttl ~= '' and task.created then
  redis.call('ZADD', KEYS[4], tonumber(task.created) + tonumber(task.ttl), ARGV[3])
end
ack(KEYS[2], ARGV[2], ARGV[3])
-- 'held' tells cancel.lua that no worker runs it (it may have a fence from an earlier run).
commit(KEYS[1], ARGV[1], task, {msg = ARGV[4], held = '1'}, task.msg ~= ARGV[4])
return 1
