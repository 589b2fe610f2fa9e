-- Fair share: move a job that has not started to the end of its queue when another
-- owner's job waits behind it (the worker found its owner already holding its share of
-- the worker's slots).
-- KEYS[1] task hash  KEYS[2] queue stream
-- ARGV[1] entry id  ARGV[2] the job's owner  ARGV[3] group  ARGV[4] entries to look at
-- Returns 1 when moved: a copy is at the end of the stream (with 'queued', when it was
-- first queued, in ms) and the task's 'entry' names it; this entry is acknowledged and
-- deleted. 0 when no other owner's job waits within the window, or the job is not
-- waiting any more (started, ended, gone): the caller runs it as usual.
local later = redis.call('XRANGE', KEYS[2], '(' .. ARGV[1], '+', 'COUNT', tonumber(ARGV[4]))
local other = false
for _, e in ipairs(later) do
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'owner' then
      other = f[i + 1] ~= ARGV[2]
      break
    end
  end
  if other then break end
end
if not other then return 0 end
local h = redis.call('HMGET', KEYS[1], 'status', 'entry', 'fence')
if h[1] ~= 'working' or h[2] ~= ARGV[1] or (h[3] and h[3] ~= '0') then return 0 end
local this = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])
if #this == 0 then return 0 end
local fields = this[1][2]
local queued = false
for i = 1, #fields, 2 do
  if fields[i] == 'queued' then queued = true end
end
if not queued then
  fields[#fields + 1] = 'queued'
  fields[#fields + 1] = string.match(ARGV[1], '^(%d+)')
end
local entry = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('HSET', KEYS[1], 'entry', entry)
redis.call('XACK', KEYS[2], ARGV[3], ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
return 1
