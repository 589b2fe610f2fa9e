-- Create a task and enqueue its job in one step, so CreateTaskResult is only sent for a
-- task that any replica can read (T-14). The owner's limits are checked in the same step,
-- so concurrent gateways cannot overshoot them.
-- KEYS[1] task hash   KEYS[2] queue stream
-- KEYS[3] the owner's creation counter for this minute   KEYS[4] the owner's unfinished tasks
--         (both only with limits; in Redis Cluster the limits are another slot: they are
--         checked and counted by limits.lua first, and this script gets 0, 0 and two keys)
-- ARGV[1] task id  ARGV[2] ttl ms ('' = never expires)  ARGV[3] poll ms  ARGV[4] owner
-- ARGV[5] tool  ARGV[6] queue  ARGV[7] job JSON
-- ARGV[8] how long the hash lives from its creation (ms): the TTL and a while after it, so
--         an expired task reads as failed for a while before it is gone (unused without a TTL)
-- ARGV[9] tasks per minute allowed (0: no limit)  ARGV[10] unfinished tasks allowed (0: none)
-- ARGV[11] for a call with an idempotency key (its id derived from owner and key): the
--          digest of its arguments; '' without a key
-- Returns: {created-at ms} | {'limit', 'rate' | 'active'} | {'existing'} (a keyed call whose
-- task is there, same tool and arguments) | {'differs', 'tool' | 'arguments'}. The unfinished set holds task
-- ids scored by when they expire; finished ones leave it when the caller prunes it at the
-- limit (Store::prune_active). Ids carry 122 random bits: no existence check.
-- Without limits: XADD, HSET, PEXPIREAT (no TIME: the entry id is the clock). With them,
-- below the unfinished limit: INCR, ZCARD, ZADD and a PEXPIREAT more.
-- Numbers stay strings where they can: a tonumber() is two strtod calls, a number passed to
-- redis.call a printf; together they were a tenth of this script's instructions.
-- A keyed call: decided here, in one step, however many gateways send it at once. Before
-- the limits, so a retry counts against nothing. One HMGET more, only with a key.
if ARGV[11] ~= '' then
  local held = redis.call('HMGET', KEYS[1], 'tool', 'argdigest')
  if held[1] then
    if held[1] ~= ARGV[5] then return {'differs', 'tool'} end
    if held[2] ~= ARGV[11] then return {'differs', 'arguments'} end
    return {'existing'}
  end
end
local rate = ARGV[9] == '0' and 0 or ARGV[9] + 0
local active = ARGV[10] == '0' and 0 or ARGV[10] + 0
-- Counted against the rate here unless refused; held among the unfinished below.
local refused, held = limit_refused(KEYS[3], KEYS[4], rate, active)
if refused then return {'limit', refused} end
-- The entry id is Redis' clock in ms (never behind the stream's last entry): it is the
-- creation time, without a TIME call.
local entry = redis.call('XADD', KEYS[2], '*', 'task', ARGV[1], 'owner', ARGV[4], 'job', ARGV[7])
local now = string.match(entry, '^(%d+)')
-- The job's stream and entry are kept so a cancel before any start can take the job off
-- the queue (cancel.lua).
if ARGV[11] == '' then
  redis.call('HSET', KEYS[1], 'status', 'working', 'created', now, 'updated', now,
    'ttl', ARGV[2], 'poll', ARGV[3], 'ver', '1', 'owner', ARGV[4], 'tool', ARGV[5], 'queue', ARGV[6],
    'stream', KEYS[2], 'entry', entry)
else
  redis.call('HSET', KEYS[1], 'status', 'working', 'created', now, 'updated', now,
    'ttl', ARGV[2], 'poll', ARGV[3], 'ver', '1', 'owner', ARGV[4], 'tool', ARGV[5], 'queue', ARGV[6],
    'stream', KEYS[2], 'entry', entry, 'argdigest', ARGV[11])
end
-- From the creation time, not from Redis' clock: after a step back of that clock, or a
-- failover to a replica whose clock is behind, the entry id (which never goes back) is
-- ahead of it, and a relative expiry would end the hash before the task reads as expired.
if ARGV[2] ~= '' then
  -- Both are digits: summed by arithmetic (one strtod each, where tonumber() is two), and
  -- the sum handed on as text ('%d'), not as a number Redis would format with '%.17g'.
  redis.call('PEXPIREAT', KEYS[1], string.format('%d', now + ARGV[8]))
end
if active > 0 then limit_hold(KEYS[4], held, ARGV[1], ARGV[2], now) end
return {now}
