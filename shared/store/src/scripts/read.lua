-- Read new jobs from a worker's streams in priority order: each stream of KEYS (every
-- queue's `high` stream, then every `normal`, then every `low`) only for what the ones
-- before it left, so no job is taken while one of a higher priority waits.
-- KEYS  the streams, in the order they are read
-- ARGV[1] group  ARGV[2] consumer  ARGV[3] most jobs in all
-- Returns: [[stream, entries], ...] as XREADGROUP, only the streams that gave some.
local want = tonumber(ARGV[3])
local out = {}
for _, key in ipairs(KEYS) do
  if want <= 0 then break end
  local got = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', want, 'STREAMS', key, '>')
  if got then
    want = want - #got[1][2]
    out[#out + 1] = got[1]
  end
end
return out
