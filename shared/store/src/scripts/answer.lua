-- tasks/update: record answers for outstanding keys; ignore other keys (T-29); validate
-- every outstanding key's answer before recording anything (T-33); at most once per key
-- (T-34); back to working when nothing is outstanding (T-31).
-- KEYS[1] task hash
-- ARGV[1] channel  ARGV[2] owner
-- ARGV[3..] triples: key, shape mask (1 elicit, 2 sampling, 4 roots), answer JSON
-- Returns: {'ok'} | {'notfound'} | {'invalid', key, method}
local st = redis.call('HMGET', KEYS[1], 'status', 'owner', 'updated', 'created', 'ttl')
if not st[1] or st[2] ~= ARGV[2] then return {'notfound'} end
if is_terminal(st[1]) then return {'ok'} end
if past_ttl(st[4], st[5]) then
  expire(KEYS[1], ARGV[1], st[4], st[5], st[3])
  return {'ok'}
end
local bits = { ['elicitation/create'] = 1, ['sampling/createMessage'] = 2, ['roots/list'] = 4 }
local apply = {}
for i = 3, #ARGV, 3 do
  local req = redis.call('HGET', KEYS[1], 'in:' .. ARGV[i])
  if req then
    local method = cjson.decode(req).method
    local bit = bits[method] or 0
    if bit == 0 or math.floor(tonumber(ARGV[i + 1]) / bit) % 2 == 0 then
      return {'invalid', ARGV[i], tostring(method)}
    end
    apply[#apply + 1] = i
  end
end
if #apply == 0 then return {'ok'} end
for _, i in ipairs(apply) do
  redis.call('HDEL', KEYS[1], 'in:' .. ARGV[i])
  redis.call('HSET', KEYS[1], 'ans:' .. ARGV[i], ARGV[i + 2])
end
local pending = redis.call('HINCRBY', KEYS[1], 'pending', -#apply)
if pending <= 0 then
  redis.call('HSET', KEYS[1], 'status', 'working', 'pending', 0)
end
touch(KEYS[1], st[3])
publish(KEYS[1], ARGV[1])
return {'ok'}
