-- Kill switch lifted: put one held job back at the end of its stream (hold.lua put it
-- aside). A job whose task ended meanwhile is dropped instead. One whose task hash is not
-- found is queued again all the same: an expired task's job is then skipped by start.lua,
-- and a key built wrongly here cannot silently drop a job that still has a task.
-- KEYS[1] held hash   KEYS[2] queue stream   KEYS[3] task hash   KEYS[4] held jobs' ends
-- ARGV[1] channel  ARGV[2] held entry id (the field in the held hash)  ARGV[3] status message
-- Returns 1 when queued again, 0 when dropped or no longer held.
local fields = redis.call('HGET', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[2])
if not fields then return 0 end
local task = load(KEYS[3])
if task and is_terminal(task.status) then
  redis.call('HDEL', KEYS[1], ARGV[2])
  return 0
end
local entry = redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(fields)))
redis.call('HDEL', KEYS[1], ARGV[2])
if task then
  commit(KEYS[3], ARGV[1], task, {entry = entry, held = '0', msg = ARGV[3]}, true)
end
return 1
