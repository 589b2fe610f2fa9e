-- A worker ends a task: terminal state, result or error, publish, XACK + XDEL.
-- A worker whose fencing token is stale writes nothing (another worker owns the task).
-- KEYS[1] task hash   KEYS[2] queue stream
-- KEYS[3] KEYS[4] KEYS[5] (only for a dead letter) the stream's dead letters (zset: task id
--         → when the letter lapses, ms), their rows (hash: task id → JSON) and their ages
--         (zset: task id → when it failed, ms)
-- ARGV[1] channel  ARGV[2] group  ARGV[3] entry id  ARGV[4] fence
-- (0: the run never took one)
-- ARGV[5] status  ARGV[6] field ('result' | 'error' | '')  ARGV[7] payload JSON
-- ARGV[8] status message ('' = keep)
-- ARGV[9] the worker's clock (ms; decimal digits only, as Store::finish sends it: it is
--         compared as text and summed by arithmetic, and anything else is a script error):
--         it stamps lastUpdatedAt (never moving it back), and only
--         when it says the TTL has passed is Redis' clock read (TIME) to confirm — as in
--         start.lua, so the usual path needs no TIME.
-- ARGV[10..13] (only for a dead letter) the task id, the letter's JSON (see keep_letter),
--          when it lapses (ms) and the most letters the stream keeps: written with the
--          terminal state (not when a cancel won), pruning up to 16 lapsed ones and up to
--          100 of the oldest beyond the most.
-- Returns: {'ok'} | {'gone'} | {'terminal', status} | {'fenced'}
-- The usual path: HGETALL, HSET, PUBLISH, XACK, XDEL; on one Redis HMGET, HSET,
-- PUBSUB NUMSUB (and HGETALL and PUBLISH when watched), XACK, XDEL.
-- The worker's clock is digits (ms since the epoch): numbers are made of it, and of the
-- task's times, by arithmetic (one strtod each; tonumber() is two), and lastUpdatedAt is
-- written from its text (STAMP_TEXT).
STAMP_TEXT = ARGV[9]
STAMP = ARGV[9] + 0
-- On one Redis (NUMSUB set) the fields checked, the whole state read only if someone is
-- watching; elsewhere every change is published, and one HGETALL serves both.
local task
if NUMSUB then
  task = load_fields(KEYS[1], 'status', 'created', 'ttl', 'updated', 'ver', 'fence', 'cancel')
else
  task = load(KEYS[1])
end
if not task then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'gone'}
end
if is_terminal(task.status) then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'terminal', task.status}
end
if task.ttl and task.ttl ~= '' and STAMP and task.created
    and STAMP >= task.created + task.ttl
    and past_ttl(task.created, task.ttl) then
  -- Work that ends after its TTL ends failed, whatever it produced.
  expire(KEYS[1], ARGV[1], task.created, task.ttl, task.updated)
  ack(KEYS[2], ARGV[2], ARGV[3])
  return {'terminal', 'failed'}
end
-- Fence 0: a first run that finished before it took a fence (the worker's optimistic
-- start). It wins only if no run has started since; a cancel of an unstarted task has
-- already ended it above.
if (task.fence or '0') ~= ARGV[4] then return {'fenced'} end
local changes = {status = ARGV[5], pending = '0'}
if task.cancel == '1' and ARGV[5] ~= 'cancelled' then
  -- The cancel was acknowledged before this run noticed it: cancellation wins, the
  -- result is not kept.
  changes = {status = 'cancelled', pending = '0', msg = 'Cancelled by request'}
else
  if ARGV[6] ~= '' then changes[ARGV[6]] = ARGV[7] end
  if ARGV[8] ~= '' then changes.msg = ARGV[8] end
end
-- A dead letter: the worker's part (ARGV[11], a JSON object without its closing brace)
-- and the job as the stream entry holds it (its arguments: a run has given them to its
-- tool), read before the entry goes.
local function keep_letter()
  local letter = ARGV[11]
  local entry = redis.call('XRANGE', KEYS[2], ARGV[3], ARGV[3])[1]
  if entry then
    local fields = entry[2]
    for i = 1, #fields, 2 do
      -- A job that is not JSON (a poison entry) is left out, so the letter still reads.
      if fields[i] == 'job' and pcall(cjson.decode, fields[i + 1]) then
        letter = letter .. ',"job":' .. fields[i + 1]
      end
    end
  end
  redis.call('ZADD', KEYS[3], ARGV[12], ARGV[10])
  redis.call('ZADD', KEYS[5], STAMP_TEXT, ARGV[10])
  redis.call('HSET', KEYS[4], ARGV[10], letter .. '}')
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', STAMP_TEXT, 'LIMIT', 0, 16)
  if #gone > 0 then
    redis.call('ZREM', KEYS[3], unpack(gone))
    redis.call('ZREM', KEYS[5], unpack(gone))
    redis.call('HDEL', KEYS[4], unpack(gone))
  end
  -- Beyond the most, the oldest failures leave first, at most 100 a call (so that a
  -- lowered bound is reached over a few failures, never with one unpack too large).
  local over = math.min(redis.call('ZCARD', KEYS[5]) - ARGV[13], 100)
  if over > 0 then
    local old = redis.call('ZRANGE', KEYS[5], 0, over - 1)
    redis.call('ZREM', KEYS[3], unpack(old))
    redis.call('ZREM', KEYS[5], unpack(old))
    redis.call('HDEL', KEYS[4], unpack(old))
  end
end
commit(KEYS[1], ARGV[1], task, changes, true)
if KEYS[4] and changes.status == ARGV[5] then keep_letter() end
ack(KEYS[2], ARGV[2], ARGV[3])
return {'ok'}
