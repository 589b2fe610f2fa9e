-- Read a 2025 session record and restart its idle timeout, only when the caller owns it:
-- a request naming someone else's session (refused as unknown by the gateway) must not
-- keep that session alive.
-- KEYS[1] session key. ARGV[1] idle timeout (ms), ARGV[2] the caller's owner digest.
-- Returns the record, or false when there is none.
local record = redis.call('GET', KEYS[1])
if not record then
  return false
end
local ok, session = pcall(cjson.decode, record)
if ok and type(session) == 'table' and session.owner == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return record
