-- Count a graceful hand-over on a task (its run was given up at shutdown, not interrupted),
-- unless the task is gone: never recreate an expired hash.
-- KEYS[1] task hash
-- Returns: 1 when counted, 0 when the task is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'handovers', 1)
return 1
