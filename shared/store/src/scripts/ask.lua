-- A running task asks for input under keys. Keys already answered replay their stored
-- answer (a re-run handler gets them at once); a key never names two requests (T-28).
-- KEYS[1] task hash
-- ARGV[1] channel  ARGV[2] fence
-- ARGV[3..] pairs: key, request JSON
-- Returns: {'answered', key, answer, ...} when every key has an answer, {'waiting'},
--          {'gone'} | {'fenced'} | {'terminal'}, or an error reply on key reuse.
local st = redis.call('HMGET', KEYS[1], 'status', 'fence', 'updated', 'created', 'ttl')
if not st[1] then return {'gone'} end
if is_terminal(st[1]) then return {'terminal'} end
if past_ttl(st[4], st[5]) then
  expire(KEYS[1], ARGV[1], st[4], st[5], st[3])
  return {'terminal'}
end
if st[2] ~= ARGV[2] then return {'fenced'} end
local answers = {'answered'}
local added = 0
local all = true
for i = 3, #ARGV, 2 do
  local k, req = ARGV[i], ARGV[i + 1]
  local ans = redis.call('HGET', KEYS[1], 'ans:' .. k)
  if ans then
    answers[#answers + 1] = k
    answers[#answers + 1] = ans
  else
    all = false
    local cur = redis.call('HGET', KEYS[1], 'in:' .. k)
    if not cur then
      redis.call('HSET', KEYS[1], 'in:' .. k, req)
      added = added + 1
    elseif cur ~= req then
      return redis.error_reply('KEYREUSE input key ' .. k .. ' already names another request')
    end
  end
end
if all then return answers end
if added > 0 then
  redis.call('HINCRBY', KEYS[1], 'pending', added)
  redis.call('HSET', KEYS[1], 'status', 'input_required')
  touch(KEYS[1], st[3])
  publish(KEYS[1], ARGV[1])
end
return {'waiting'}
