-- An owner's stored bytes (MCPT_LIMIT_STORED_BYTES): what its tasks keep in Redis (job
-- arguments, results) until they expire. Counted per expiry bucket, so the total falls
-- as tasks expire without anything watching them.
-- KEYS[1] the owner's counts (hash: 'total', and bytes per bucket)
-- KEYS[2] the owner's buckets (zset: bucket -> when it lapses, ms)
-- ARGV[1] bytes to add (negative: take back bytes counted for a create that failed)
-- ARGV[2] when they lapse (ms; 0: never)  ARGV[3] the limit
-- ARGV[4] 'create' (refused while the total is at the limit), 'result' (refused when
--         the bytes would take the total past it) or 'undo'  ARGV[5] bucket width (ms)
-- ARGV[6] how long the counts are kept (ms; past the longest TTL)
-- Returns {1, total} when counted, {0, total} when refused (nothing counted).
local now = now_ms()
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #lapsed > 0 then
  local gone = 0
  for _, b in ipairs(lapsed) do
    gone = gone + (tonumber(redis.call('HGET', KEYS[1], b)) or 0)
    redis.call('HDEL', KEYS[1], b)
  end
  redis.call('HINCRBY', KEYS[1], 'total', -gone)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
end
local total = tonumber(redis.call('HGET', KEYS[1], 'total')) or 0
local bytes, limit = tonumber(ARGV[1]), tonumber(ARGV[3])
if limit > 0 then
  if (ARGV[4] == 'create' and total >= limit) or (ARGV[4] == 'result' and total + bytes > limit) then
    return {0, total}
  end
end
if bytes ~= 0 then
  local lapses, width = tonumber(ARGV[2]), tonumber(ARGV[5])
  local bucket = 'never'
  if lapses > 0 then
    local ends = math.ceil(lapses / width) * width
    bucket = string.format('%d', ends)
    redis.call('ZADD', KEYS[2], ends, bucket)
    redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[6]))
  end
  redis.call('HINCRBY', KEYS[1], bucket, bytes)
  total = redis.call('HINCRBY', KEYS[1], 'total', bytes)
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[6]))
end
return {1, total}
