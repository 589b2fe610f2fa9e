-- An owner's limits (create.lua, and limits.lua in Redis Cluster): `rate_key` counts the
-- tasks created this minute, `active_key` holds the unfinished ones scored by when they
-- expire. 0 means no limit. `limit_refused` returns 'rate' or 'active' when a new task
-- would exceed one (refused attempts are not counted), else nil.
local function limit_refused(rate_key, active_key, rate, active)
  if rate > 0 and tonumber(redis.call('GET', rate_key) or '0') >= rate then
    return 'rate'
  end
  if active > 0 then
    redis.call('ZREMRANGEBYSCORE', active_key, '-inf', now_ms())
    if redis.call('ZCARD', active_key) >= active then return 'active' end
  end
  return nil
end

-- Count task `id` (lifetime `ttl` ms, '' = none, from `now` ms) against the limits.
local function limit_count(rate_key, active_key, rate, active, id, ttl, now)
  if rate > 0 and redis.call('INCR', rate_key) == 1 then
    redis.call('PEXPIRE', rate_key, 61000)
  end
  if active > 0 then
    if ttl == '' then
      redis.call('ZADD', active_key, '+inf', id)
      redis.call('PERSIST', active_key)
    else
      redis.call('ZADD', active_key, now + tonumber(ttl), id)
      local left = redis.call('PTTL', active_key)
      if left >= 0 and left < tonumber(ttl) then
        redis.call('PEXPIRE', active_key, tonumber(ttl))
      end
    end
  end
end
