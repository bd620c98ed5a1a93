-- release: remove one holder by its token; the key goes when its last live holder does.
-- With a minimum hold (--min-hold), a holder released early is kept until since + min_hold
-- instead, so a late duplicate (a cron host with a skewed clock) still finds the lock taken.
-- KEYS[1] holders hash
-- ARGV[1] token, ARGV[2] min_hold_ms (0 = none)
-- Returns 1 when released, {2, kept_ms} when kept for the minimum hold, 0 when the token holds
-- nothing (expired, released, never held).
local holders_key = KEYS[1]
local token, min_hold = ARGV[1], tonumber(ARGV[2])

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

local keep_until = mine.since + min_hold
if keep_until > now then
  mine.exp = keep_until
  mine.ttl = keep_until - now
  redis.call('HSET', holders_key, token, cjson.encode(mine))
  if keep_until > latest then latest = keep_until end
  redis.call('PEXPIRE', holders_key, latest - now)
  return {2, keep_until - now}
end

if others == 0 then
  redis.call('DEL', holders_key)
else
  redis.call('HDEL', holders_key, token)
  redis.call('PEXPIRE', holders_key, latest - now)
end
return 1
