-- Redis Cluster only: check and count an owner's limits before create.lua runs (the owner's
-- keys share the tag {OWNER}, another slot than the task's). Standalone, create.lua does
-- this in its own step. A create that then fails is taken back by Store::create_task
-- (best effort; a gateway dying in between leaves one count for the minute, and an id in
-- the unfinished set that prune_active drops because no such task exists).
-- KEYS[1] the owner's creation counter for this minute   KEYS[2] the owner's unfinished tasks
-- ARGV[1] task id  ARGV[2] ttl ms ('' = never expires)
-- ARGV[3] tasks per minute allowed (0: no limit)  ARGV[4] unfinished tasks allowed (0: none)
-- Returns: {'ok'} | {'known'} | {'limit', 'rate' | 'active'}
local rate, active = ARGV[3] + 0, ARGV[4] + 0
-- A keyed call's retry names its task again: already counted, it is neither counted
-- twice nor refused at the limit it already holds a place under.
if active > 0 and redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {'known'} end
local refused, held = limit_refused(KEYS[1], KEYS[2], rate, active)
if refused then return {'limit', refused} end
if active > 0 then limit_hold(KEYS[2], held, ARGV[1], ARGV[2], now_ms()) end
return {'ok'}
