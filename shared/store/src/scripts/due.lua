-- Move the jobs of a delayed set that are due (retry.lua put them there) back to the end of
-- their stream, where the next free worker slot reads them. Any worker may run it, any
-- number of times: each job moves once (ZREM in the same step as XADD).
-- KEYS[1] delayed set   KEYS[2] queue stream
-- ARGV[1] most jobs to move
-- Returns how many moved.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
for _, member in ipairs(due) do
  redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(member)))
  redis.call('ZREM', KEYS[1], member)
end
return #due
