-- A task hash and its channel (needs clock.lua). PUBLISH is 'PUBLISH', or 'SPUBLISH' in
-- Redis Cluster, where a task's channel is a shard channel in the slot of its hash; NUMSUB
-- is 'NUMSUB' on one Redis, else nil. Task hash fields:
--   status msg created updated ttl poll ver owner tool queue result error
--   cancel fence worker pending in:<key> ans:<key>

-- The whole task hash as a table (nil when it is gone): one HGETALL that serves the
-- checks, the version bump and the published state.
local function load(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then return nil end
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

-- Whether anyone may be subscribed to a task's channel. On one Redis (NUMSUB set) a change
-- no one subscribed to is not encoded or published: most tasks are polled, and encoding
-- the task was about half of a finishing script's time. Nothing is missed: a script runs
-- whole, so a subscription made after it is confirmed after it, and its watcher reads the
-- task only then (T-50), seeing this change.
local function watched(channel)
  return not NUMSUB or redis.call('PUBSUB', NUMSUB, channel)[2] > 0
end

-- Publish the whole hash (a flat JSON array of field, value, ...) on the task's channel,
-- if anyone is listening.
local function publish(key, channel)
  if watched(channel) then
    redis.call(PUBLISH, channel, cjson.encode(redis.call('HGETALL', key)))
  end
end

-- Marks a table `load_fields` made: some of the task's fields, not all.
local PARTIAL = {}

-- Only the named fields of a task hash, `status` first (nil when the hash is gone), for a
-- script that checks a few of them on one Redis, where a change is mostly published to no
-- one: `commit` then reads the whole hash only when someone is watching. A field the hash
-- lacks is nil.
local function load_fields(key, ...)
  local names = {...}
  local values = redis.call('HMGET', key, unpack(names))
  if not values[1] then return nil end
  local t = {[PARTIAL] = true}
  for i, f in ipairs(names) do
    if values[i] then t[f] = values[i] end
  end
  return t
end

-- Publish a task loaded whole (a flat JSON array of field, value, ...) on its channel, if
-- anyone is listening.
local function publish_task(channel, task)
  if not watched(channel) then return end
  local flat = {}
  for f, v in pairs(task) do
    flat[#flat + 1] = f
    flat[#flat + 1] = v
  end
  redis.call(PUBLISH, channel, cjson.encode(flat))
end

-- Write `changes` (field -> string) to a loaded task (whole, or the fields `load_fields`
-- read, `updated` and `ver` among them) in one HSET. An observable change also moves
-- lastUpdatedAt forward (never back) and bumps the version; `channel` then gets the new
-- state, if anyone is listening (read again after the HSET when only some fields were
-- loaded).
local function commit(key, channel, task, changes, observable)
  if observable then
    changes.updated = later_text(STAMP_TEXT or string.format('%d', stamp_ms()),
      task.updated or '0')
    changes.ver = string.format('%d', (tonumber(task.ver or '0') or 0) + 1)
  end
  local args = {}
  for f, v in pairs(changes) do
    args[#args + 1] = f
    args[#args + 1] = v
    task[f] = v
  end
  redis.call('HSET', key, unpack(args))
  if not channel then return end
  if task[PARTIAL] then publish(key, channel) else publish_task(channel, task) end
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

-- TTL (T-52): a task still running when createdAt + ttlMs passes ends failed with this
-- error (code -32603, internal error), and its lastUpdatedAt is that instant — the same
-- state readers render for an unfinished task past its TTL.
local EXPIRED = 'Task expired before completion'
local EXPIRED_ERROR = '{"code":-32603,"message":"Task expired before completion"}'

local function past_ttl(created, ttl)
  if not ttl or ttl == '' or not created then return false end
  return now_ms() >= tonumber(created) + tonumber(ttl)
end

local function expire(key, channel, created, ttl, updated)
  local at = tonumber(created) + tonumber(ttl)
  local prev = tonumber(updated or '0') or 0
  if prev > at then at = prev end
  redis.call('HSET', key, 'status', 'failed', 'msg', EXPIRED, 'error', EXPIRED_ERROR,
    'pending', 0, 'updated', string.format('%d', at))
  redis.call('HINCRBY', key, 'ver', 1)
  publish(key, channel)
end

-- Acknowledge and delete a job's stream entry: its task is done with it.
local function ack(stream, group, entry)
  redis.call('XACK', stream, group, entry)
  redis.call('XDEL', stream, entry)
end
