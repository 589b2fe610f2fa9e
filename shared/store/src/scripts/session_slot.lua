-- Count a new 2025 session among its owner's open ones.
-- KEYS[1] the owner's sessions (id scored by when opened)
-- ARGV[1] session id  ARGV[2] most open at once  ARGV[3] how long the set is kept (ms)
-- Returns 1 when counted, 0 when the owner already holds the limit (sessions that ended
-- or lapsed are dropped by Store::prune_sessions, then the caller tries again).
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now_ms(), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
