-- Link a task to another (a redriven dead letter and its new task, both ways): the other's
-- id joins the task's `related` field (ids separated by spaces), unless the hash is gone
-- (an expired task is not made again) or the id is there already.
-- KEYS[1] task hash   ARGV[1] the other task's id
-- Returns 1 when the task is linked, 0 when its hash is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local have = redis.call('HGET', KEYS[1], 'related')
if not have or have == '' then
  redis.call('HSET', KEYS[1], 'related', ARGV[1])
elseif not string.find(' ' .. have .. ' ', ' ' .. ARGV[1] .. ' ', 1, true) then
  redis.call('HSET', KEYS[1], 'related', have .. ' ' .. ARGV[1])
end
return 1
