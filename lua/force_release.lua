-- force_release: remove every holder of the lock, whoever they are, and say who they were.
-- KEYS[1] holders hash
-- Returns {now_ms, holder_json...} listing the live holders that were evicted.
local holders_key = KEYS[1]

local holders_type = redis.call('TYPE', holders_key)['ok']
if holders_type ~= 'none' and holders_type ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. holders_key .. ' is a ' .. holders_type .. ' that redlock did not write')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local fields = redis.call('HGETALL', holders_key)
local evicted = {now}
for i = 1, #fields, 2 do
  local ok, holder = pcall(cjson.decode, fields[i + 1])
  if not ok or type(holder) ~= 'table' or type(holder.exp) ~= 'number' then
    return redis.error_reply('WRONGTYPE ' .. holders_key .. ' holds a field that redlock did not write')
  end
  if holder.exp > now then
    evicted[#evicted + 1] = fields[i + 1]
  end
end
redis.call('DEL', holders_key)
return evicted
