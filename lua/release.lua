-- release: remove one holder by its token; the key goes when its last live holder does.
-- KEYS[1] holders hash
-- ARGV[1] token
-- Returns 1 when released, 0 when the token holds nothing (expired, released, never held).
local holders_key = KEYS[1]
local token = ARGV[1]

local holders_type = redis.call('TYPE', holders_key)['ok']
if holders_type ~= 'none' and holders_type ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. holders_key .. ' is a ' .. holders_type .. ' that redlock did not write')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local fields = redis.call('HGETALL', holders_key)
local mine
local others, latest = 0, now
for i = 1, #fields, 2 do
  local ok, holder = pcall(cjson.decode, fields[i + 1])
  if not ok or type(holder) ~= 'table' or type(holder.exp) ~= 'number' then
    return redis.error_reply('WRONGTYPE ' .. holders_key .. ' holds a field that redlock did not write')
  end
  if fields[i] == token then
    mine = holder
  elseif holder.exp > now then
    others = others + 1
    if holder.exp > latest then latest = holder.exp end
  end
end
if mine == nil or mine.exp <= now then
  return 0
end

if others == 0 then
  redis.call('DEL', holders_key)
else
  redis.call('HDEL', holders_key, token)
  redis.call('PEXPIRE', holders_key, latest - now)
end
return 1
