-- An owner's limits (create.lua, and limits.lua in Redis Cluster): `rate_key` counts the
-- tasks created this minute, `active_key` holds the unfinished ones scored by when they
-- expire. Limits are numbers, 0 for none.
--
-- `limit_refused` counts the new task against the rate and returns 'rate' or 'active' when
-- it would exceed a limit (a refused attempt is not counted), else nil and how many the
-- unfinished set held. Below the limit the set's expired members stay: they leave when it
-- is reached, so a create under it pays a ZCARD, not a TIME and a ZREMRANGEBYSCORE.
local function limit_refused(rate_key, active_key, rate, active)
  local counted = false
  if rate > 0 then
    -- Counted first and taken back when refused: one INCR where a GET and an INCR were.
    local made = redis.call('INCR', rate_key)
    if made == 1 then redis.call('PEXPIRE', rate_key, '61000') end
    if made > rate then
      redis.call('DECR', rate_key)
      return 'rate'
    end
    counted = true
  end
  local held = 0
  if active > 0 then
    held = redis.call('ZCARD', active_key)
    if held >= active then
      redis.call('ZREMRANGEBYSCORE', active_key, '-inf', now_ms())
      held = redis.call('ZCARD', active_key)
      if held >= active then
        if counted then redis.call('DECR', rate_key) end
        return 'active'
      end
    end
  end
  return nil, held
end

-- Hold task `id` (lifetime `ttl` ms as digits, '' = none, from `now` ms as digits) in the
-- unfinished set, which `held` members held before it. The set lives as long as its
-- longest-lived member: it expires with it, or never while one has no TTL.
local function limit_hold(active_key, held, id, ttl, now)
  if ttl == '' then
    redis.call('ZADD', active_key, '+inf', id)
    redis.call('PERSIST', active_key)
    return
  end
  -- Digits summed by arithmetic (one strtod each) and handed on as '%d' text.
  local ends = string.format('%d', now + ttl)
  redis.call('ZADD', active_key, ends, id)
  if held == 0 then
    -- A new set: no expiry yet (GT would read none as forever).
    redis.call('PEXPIREAT', active_key, ends)
  elseif redis.call('PEXPIREAT', active_key, ends, 'GT') == 0
      and redis.call('PTTL', active_key) == -1 then
    -- No expiry (GT reads none as forever): the set holds a task without a TTL, or held
    -- one that has left, or was made when these sets never expired. It lives as long as
    -- its longest-lived member.
    local last = redis.call('ZRANGE', active_key, -1, -1, 'WITHSCORES')
    if last[2] ~= 'inf' then redis.call('PEXPIREAT', active_key, last[2]) end
  end
end
