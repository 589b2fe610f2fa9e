-- Take, or keep, the fleet-wide lease to sweep a queue for abandoned jobs (SET NX PX):
-- one worker sweeps at a time, and the holder may go on while it keeps finding work.
-- KEYS[1] sweep lease key
-- ARGV[1] consumer  ARGV[2] hold ms
-- Returns: 1 when this consumer holds the lease now, else 0.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
