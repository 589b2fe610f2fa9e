-- A stream entry's fields (`src`, flat) copied to be queued again (defer.lua, hold.lua,
-- retry.lua): without field `drop` (nil for none), and with 'queued' (when it was first
-- queued, ms: the first entry id's time) added when absent, so it keeps its place in time.
local function requeue_fields(src, entry_id, drop)
  local fields, queued = {}, false
  for i = 1, #src, 2 do
    if src[i] ~= drop then
      fields[#fields + 1] = src[i]
      fields[#fields + 1] = src[i + 1]
    end
    if src[i] == 'queued' then queued = true end
  end
  if not queued then
    fields[#fields + 1] = 'queued'
    fields[#fields + 1] = string.match(entry_id, '^(%d+)')
  end
  return fields
end
