-- Rate limit (`rate = "10/min"`, per tool or per `concurrency_key` value): a sliding
-- window of the last starts. A task may start when fewer than ARGV[2] started within the
-- last ARGV[3] ms; a task that already counted (its job delivered again) starts at once.
-- KEYS[1] starts: task id -> when it started (ms)
-- ARGV[1] task id  ARGV[2] starts allowed per window  ARGV[3] window ms
-- Returns {1, 0} to start, or {0, ms until a start leaves the window}.
local now = now_ms()
local window = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {1, 0} end
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, 0}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, math.max(1, tonumber(oldest[2]) + window - now)}
