-- An owner's stored bytes (MCPT_LIMIT_STORED_BYTES): what its tasks keep in Redis (job
-- arguments, results) until they expire. Counted per expiry bucket, so the total falls
-- as tasks expire without anything watching them.
-- KEYS[1] the owner's counts (hash: 'total', 'next' = when the earliest bucket lapses,
--         and bytes per bucket)
-- KEYS[2] the owner's buckets (zset: bucket -> when it lapses, ms)
-- ARGV[1] bytes to add (negative: take back bytes counted for a create that failed)
-- ARGV[2] when they lapse (ms; 0: never)  ARGV[3] the limit
-- ARGV[4] 'create' (refused while the total is at the limit), 'result' (refused when
--         the bytes would take the total past it) or 'undo'  ARGV[5] bucket width (ms)
-- ARGV[6] how long the counts are kept (ms; past the longest TTL)
-- Returns {1, total} when counted, {0, total} when refused (nothing counted).
-- Three commands in the common case (HMGET and two HINCRBY): the bucket set is read only
-- when a bucket has lapsed, and written only when a bucket is new.
local now = now_ms()
local head = redis.call('HMGET', KEYS[1], 'total', 'next')
local total = tonumber(head[1]) or 0
local next_lapse = tonumber(head[2])
if next_lapse and next_lapse <= now then
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  local gone = 0
  for _, b in ipairs(lapsed) do
    gone = gone + (tonumber(redis.call('HGET', KEYS[1], b)) or 0)
    redis.call('HDEL', KEYS[1], b)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  total = redis.call('HINCRBY', KEYS[1], 'total', -gone)
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #first > 0 then
    next_lapse = tonumber(first[2])
    redis.call('HSET', KEYS[1], 'next', first[2])
  else
    next_lapse = nil
    redis.call('HDEL', KEYS[1], 'next')
  end
end
local bytes, limit = tonumber(ARGV[1]), tonumber(ARGV[3])
if limit > 0 then
  if (ARGV[4] == 'create' and total >= limit) or (ARGV[4] == 'result' and total + bytes > limit) then
    return {0, total}
  end
end
if bytes ~= 0 then
  local lapses, width = tonumber(ARGV[2]), tonumber(ARGV[5])
  local bucket, ends = 'never', nil
  if lapses > 0 then
    ends = math.ceil(lapses / width) * width
    bucket = string.format('%d', ends)
  end
  local in_bucket = redis.call('HINCRBY', KEYS[1], bucket, bytes)
  if in_bucket == bytes then
    -- A new bucket (or one back from zero: the same writes again, harmless).
    local kept = tonumber(ARGV[6])
    if ends then
      redis.call('ZADD', KEYS[2], ends, bucket)
      redis.call('PEXPIRE', KEYS[2], kept)
      if not next_lapse or ends < next_lapse then
        redis.call('HSET', KEYS[1], 'next', bucket)
      end
    end
    redis.call('PEXPIRE', KEYS[1], kept)
  end
  total = redis.call('HINCRBY', KEYS[1], 'total', bytes)
end
return {1, total}
