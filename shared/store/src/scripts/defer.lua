-- Fair share: move a job that has not started to the end of its queue when the job of
-- an owner below its share waits behind it (the worker found this job's owner already
-- holding its share of the worker's slots). Owners at their share do not count as
-- waiting: when every waiting owner is at its share, their jobs would otherwise take
-- turns at the end of the queue for ever.
-- KEYS[1] task hash  KEYS[2] queue stream
-- ARGV[1] entry id  ARGV[2] group  ARGV[3] entries to look at
-- ARGV[4..] the owners at their share on this worker (this job's owner first)
-- Returns 1 when moved: a copy is at the end of the stream (with 'queued', when it was
-- first queued, in ms) and the task's 'entry' names it; this entry is acknowledged and
-- deleted. 0 when no other owner's job waits within the window, or the job is not
-- waiting any more (started, ended, gone): the caller runs it as usual.
local full = {}
for i = 4, #ARGV do full[ARGV[i]] = true end
local this = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])
if #this == 0 then return 0 end
local h = redis.call('HMGET', KEYS[1], 'status', 'entry', 'fence')
if h[1] ~= 'working' or h[2] ~= ARGV[1] or (h[3] and h[3] ~= '0') then return 0 end
-- Look behind it a few entries at a time (each comes whole, job included), stopping at
-- the first of another owner's.
local window, seen, from, other = tonumber(ARGV[3]), 0, '(' .. ARGV[1], false
while not other and seen < window do
  local batch = redis.call('XRANGE', KEYS[2], from, '+', 'COUNT', 32)
  if #batch == 0 then break end
  for _, e in ipairs(batch) do
    local f = e[2]
    for i = 1, #f, 2 do
      if f[i] == 'owner' then
        other = not full[f[i + 1]]
        break
      end
    end
    if other then break end
  end
  seen = seen + #batch
  from = '(' .. batch[#batch][1]
end
if not other then return 0 end
local entry = redis.call('XADD', KEYS[2], '*', unpack(requeue_fields(this[1][2], ARGV[1], nil)))
redis.call('HSET', KEYS[1], 'entry', entry)
redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
return 1
