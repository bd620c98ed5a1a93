-- inspect: read the state of one lock without changing it.
-- KEYS[1] holders hash, KEYS[2] fence counter
-- Returns {now_ms, last_fence or false, holder_json...} listing live holders only.
local holders_key, fence_key = KEYS[1], KEYS[2]

local holders_type = redis.call('TYPE', holders_key)['ok']
if holders_type ~= 'none' and holders_type ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. holders_key .. ' is a ' .. holders_type .. ' that redlock did not write')
end
local fence_type = redis.call('TYPE', fence_key)['ok']
if fence_type ~= 'none' and fence_type ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. fence_key .. ' is a ' .. fence_type .. ' that redlock did not write')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local state = {now, redis.call('GET', fence_key)}
local fields = redis.call('HGETALL', holders_key)
for i = 1, #fields, 2 do
  local ok, holder = pcall(cjson.decode, fields[i + 1])
  if not ok or type(holder) ~= 'table' or type(holder.exp) ~= 'number' then
    return redis.error_reply('WRONGTYPE ' .. holders_key .. ' holds a field that redlock did not write')
  end
  if holder.exp > now then
    state[#state + 1] = fields[i + 1]
  end
end
return state
