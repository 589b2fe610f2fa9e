-- Create a task and enqueue its job in one step, so CreateTaskResult is only sent for a
-- task that any replica can read (T-14).
-- KEYS[1] task hash   KEYS[2] queue stream
-- ARGV[1] task id  ARGV[2] ttl ms ('' = never expires)  ARGV[3] poll ms  ARGV[4] owner
-- ARGV[5] tool  ARGV[6] queue  ARGV[7] job JSON
-- ARGV[8] how long the hash outlives the TTL (ms), so an expired task reads as failed
--         for a while before it is gone
-- Returns: {created-at ms} or an error reply if the id exists.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('EXISTS task id already in use')
end
local now = string.format('%d', now_ms())
redis.call('HSET', KEYS[1], 'status', 'working', 'created', now, 'updated', now,
  'ttl', ARGV[2], 'poll', ARGV[3], 'ver', 1, 'owner', ARGV[4], 'tool', ARGV[5], 'queue', ARGV[6])
if ARGV[2] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], tonumber(now) + tonumber(ARGV[2]) + tonumber(ARGV[8]))
end
redis.call('XADD', KEYS[2], '*', 'task', ARGV[1], 'job', ARGV[7])
return {now}
