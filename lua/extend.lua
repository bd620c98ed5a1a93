-- extend: reset the expiry of a live holder; never re-creates an expired or foreign lock.
-- KEYS[1] holders hash
-- ARGV[1] token, ARGV[2] ttl_ms
-- Returns {1, now_ms} when extended, {0, now_ms} when the token holds nothing.
local holders_key = KEYS[1]
local token, ttl = ARGV[1], tonumber(ARGV[2])

local holders_type = redis.call('TYPE', holders_key)['ok']
if holders_type ~= 'none' and holders_type ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. holders_key .. ' is a ' .. holders_type .. ' that redlock did not write')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local fields = redis.call('HGETALL', holders_key)
local mine
local latest = now + ttl
for i = 1, #fields, 2 do
  local ok, holder = pcall(cjson.decode, fields[i + 1])
  if not ok or type(holder) ~= 'table' or type(holder.exp) ~= 'number' then
    return redis.error_reply('WRONGTYPE ' .. holders_key .. ' holds a field that redlock did not write')
  end
  if fields[i] == token then
    mine = holder
  elseif holder.exp > latest then
    latest = holder.exp
  end
end
if mine == nil or mine.exp <= now then
  return {0, now}
end

mine.exp = now + ttl
mine.ttl = ttl
redis.call('HSET', holders_key, token, cjson.encode(mine))
redis.call('PEXPIRE', holders_key, latest - now)
return {1, now}
