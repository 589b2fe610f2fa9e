-- A worker ends a task: terminal state, result or error, publish, XACK + XDEL.
-- A worker whose fencing token is stale writes nothing (another worker owns the task).
-- KEYS[1] task hash   KEYS[2] queue stream
-- ARGV[1] channel  ARGV[2] group  ARGV[3] entry id  ARGV[4] fence
-- (0: the run never took one)
-- ARGV[5] status  ARGV[6] field ('result' | 'error' | '')  ARGV[7] payload JSON
-- ARGV[8] status message ('' = keep)
-- ARGV[9] the worker's clock (ms; decimal digits only, as Store::finish sends it: it is
--         compared as text and summed by arithmetic, and anything else is a script error):
--         it stamps lastUpdatedAt (never moving it back), and only
--         when it says the TTL has passed is Redis' clock read (TIME) to confirm — as in
--         start.lua, so the usual path needs no TIME.
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
commit(KEYS[1], ARGV[1], task, changes, true)
ack(KEYS[2], ARGV[2], ARGV[3])
return {'ok'}
