-- Concurrency limit (`max_running`, per tool or per `concurrency_key` value): take one of
-- the limit's slots for a task, in arrival order. A slot is a lease: a worker renews it
-- while the task runs (renew_slots), and a slot whose lease lapsed (its worker died) is
-- free again here. Tasks that found no slot wait in line (their jobs in their stream's
-- delayed set, asking again every few hundred ms); one that stops asking (cancelled,
-- expired) leaves the line after ARGV[5] ms.
-- KEYS[1] running: task id -> lease end (ms)   KEYS[2] line: task id -> arrival (ms)
-- KEYS[3] last asked: task id -> ms
-- ARGV[1] task id  ARGV[2] slots  ARGV[3] lease ms  ARGV[4] arrival ms  ARGV[5] stale ms
-- Returns {1, running} when the slot is taken (or already held), {0, running} when the
-- task waits.
local now = now_ms()
local id, slots, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], id) then
  redis.call('ZADD', KEYS[1], now + lease, id)
  return {1, redis.call('ZCARD', KEYS[1])}
end
local running = redis.call('ZCARD', KEYS[1])
redis.call('ZADD', KEYS[2], 'NX', tonumber(ARGV[4]), id)
redis.call('HSET', KEYS[3], id, now)
local free = slots - running
if free <= 0 then return {0, running} end
-- The first `free` in line may go; drop from the front those that stopped asking.
local ahead = redis.call('ZRANGE', KEYS[2], 0, free - 1)
for _, other in ipairs(ahead) do
  if other == id then
    redis.call('ZADD', KEYS[1], now + lease, id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    return {1, running + 1}
  end
  local asked = tonumber(redis.call('HGET', KEYS[3], other) or '0')
  if asked < now - tonumber(ARGV[5]) then
    redis.call('ZREM', KEYS[2], other)
    redis.call('HDEL', KEYS[3], other)
  end
end
return {0, running}
