-- Move the jobs of a delayed set that are due (retry.lua and park.lua put them there) back
-- to the end of their stream, where the next free worker slot reads them. Any worker may run
-- it, any number of times: each job moves once (ZREM in the same step as XADD).
-- KEYS[1] delayed set   KEYS[2] queue stream
-- ARGV[1] most jobs to move
-- Returns {how many moved, ms until the next job left is due (0: due now) or -1 when none
-- waits}, so a worker sleeps until then instead of asking every tick.
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, member in ipairs(due) do
  redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(member)))
  redis.call('ZREM', KEYS[1], member)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then return {#due, -1} end
local wait = tonumber(first[2]) - now
if wait < 0 then wait = 0 end
return {#due, math.floor(wait)}
