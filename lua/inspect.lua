-- inspect: read the state of one lock without changing it.
-- KEYS[1] holders hash, KEYS[2] fence counter, KEYS[3] queue hash
-- Returns {now_ms, last_fence or false, {holder_json...}, {waiter_json...}}: live holders, and
-- live waiters in queue order.
local holders_key, fence_key, queue_key = KEYS[1], KEYS[2], KEYS[3]

local function foreign(key, what)
  return redis.error_reply('WRONGTYPE ' .. key .. ' ' .. what .. ' that redlock did not write')
end
for _, spec in ipairs({{holders_key, 'hash'}, {fence_key, 'string'}, {queue_key, 'hash'}}) do
  local found = redis.call('TYPE', spec[1])['ok']
  if found ~= 'none' and found ~= spec[2] then return foreign(spec[1], 'is a ' .. found) end
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local function live(key)
  local fields, found = redis.call('HGETALL', key), {}
  for i = 1, #fields, 2 do
    local ok, record = pcall(cjson.decode, fields[i + 1])
    if not ok or type(record) ~= 'table' or type(record.exp) ~= 'number' then return nil end
    if record.exp > now then found[#found + 1] = record end
  end
  return found
end
local holders = live(holders_key)
if holders == nil then return foreign(holders_key, 'holds a field') end
local queue = live(queue_key)
if queue == nil then return foreign(queue_key, 'holds a field') end
table.sort(queue, function(a, b) return a.seq < b.seq end)

local holder_json, waiter_json = {}, {}
for _, holder in ipairs(holders) do holder_json[#holder_json + 1] = cjson.encode(holder) end
for _, entry in ipairs(queue) do
  entry.tok = nil
  waiter_json[#waiter_json + 1] = cjson.encode(entry)
end
return {now, redis.call('GET', fence_key), holder_json, waiter_json}
