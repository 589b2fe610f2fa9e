-- Kill switch lifted: put one held job back at the end of its stream (hold.lua put it
-- aside). A job whose task ended or expired meanwhile is dropped instead.
-- KEYS[1] held hash   KEYS[2] queue stream   KEYS[3] task hash
-- ARGV[1] channel  ARGV[2] held entry id (the field in the held hash)  ARGV[3] status message
-- Returns 1 when queued again, 0 when dropped or no longer held.
local fields = redis.call('HGET', KEYS[1], ARGV[2])
if not fields then return 0 end
redis.call('HDEL', KEYS[1], ARGV[2])
local task = load(KEYS[3])
if not task or is_terminal(task.status) then return 0 end
local entry = redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(fields)))
commit(KEYS[3], ARGV[1], task, {entry = entry, held = '0', msg = ARGV[3]}, true)
return 1
