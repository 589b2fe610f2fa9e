-- Concurrency and rate limits: a job that may not start yet waits in its stream's delayed
-- set, due again in ARGV[4] ms, holding no worker slot; its task stays `working` with status
-- message ARGV[5]. (The same set and mover as retries: due.lua.)
-- KEYS[1] task hash   KEYS[2] queue stream   KEYS[3] delayed set (the stream's hash tag)
-- ARGV[1] channel  ARGV[2] group  ARGV[3] entry id  ARGV[4] ms until asked again
-- ARGV[5] status message
-- Returns 1 when parked; 0 when nothing needs to wait (entry or task gone or ended; the
-- entry is acknowledged and deleted).
local this = redis.call('XRANGE', KEYS[2], ARGV[3], ARGV[3])
if #this == 0 then return 0 end
local task = load(KEYS[1])
if not task or is_terminal(task.status) then
  ack(KEYS[2], ARGV[2], ARGV[3])
  return 0
end
local fields = requeue_fields(this[1][2], ARGV[3], nil)
redis.call('ZADD', KEYS[3], now_ms() + tonumber(ARGV[4]), cjson.encode(fields))
ack(KEYS[2], ARGV[2], ARGV[3])
commit(KEYS[1], ARGV[1], task, {msg = ARGV[5], held = '1'}, task.msg ~= ARGV[5] or task.held ~= '1')
return 1
