-- Shared by every script (prepended by store::scripts). Task hash fields:
--   status msg created updated ttl poll ver owner tool queue result error
--   cancel fence worker pending in:<key> ans:<key>
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function is_terminal(s)
  return s == 'completed' or s == 'failed' or s == 'cancelled'
end

-- An observable change: lastUpdatedAt moves forward (never back), the version bumps.
local function touch(key, updated)
  local now = now_ms()
  local prev = tonumber(updated or '0') or 0
  if prev > now then now = prev end
  redis.call('HSET', key, 'updated', string.format('%d', now))
  return redis.call('HINCRBY', key, 'ver', 1)
end

-- Publish the whole hash (a flat JSON array of field, value, ...) on the task's channel.
local function publish(key, channel)
  redis.call('PUBLISH', channel, cjson.encode(redis.call('HGETALL', key)))
end

local function ack(stream, group, entry)
  redis.call('XACK', stream, group, entry)
  redis.call('XDEL', stream, entry)
end
