-- acquire: take the lock for a new holder, or report who holds it.
-- KEYS[1] holders hash, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] ttl_ms, ARGV[3] mode, ARGV[4] host, ARGV[5] pid, ARGV[6] user, ARGV[7] command
-- Returns {1, fence, now_ms} on success, {0, now_ms, holder_json} when busy.
-- Every check happens before the first write, so an error reply leaves Redis untouched.
local holders_key, fence_key = KEYS[1], KEYS[2]
local token, ttl = ARGV[1], tonumber(ARGV[2])

local holders_type = redis.call('TYPE', holders_key)['ok']
if holders_type ~= 'none' and holders_type ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. holders_key .. ' is a ' .. holders_type .. ' that redlock did not write')
end
local fence_type = redis.call('TYPE', fence_key)['ok']
if fence_type ~= 'none' and fence_type ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. fence_key .. ' is a ' .. fence_type .. ' that redlock did not write')
end
if fence_type == 'string' and not string.match(redis.call('GET', fence_key), '^%d+$') then
  return redis.error_reply('WRONGTYPE ' .. fence_key .. ' holds a value that is not a redlock fence counter')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local fields = redis.call('HGETALL', holders_key)
local expired = {}
for i = 1, #fields, 2 do
  local ok, holder = pcall(cjson.decode, fields[i + 1])
  if not ok or type(holder) ~= 'table' or type(holder.exp) ~= 'number' then
    return redis.error_reply('WRONGTYPE ' .. holders_key .. ' holds a field that redlock did not write')
  end
  if holder.exp > now then
    -- Exclusive mode: any live holder makes the lock busy.
    return {0, now, fields[i + 1]}
  end
  expired[#expired + 1] = fields[i]
end

local fence = redis.call('INCR', fence_key)
if #expired > 0 then
  redis.call('HDEL', holders_key, unpack(expired))
end
redis.call('HSET', holders_key, token, cjson.encode({
  mode = ARGV[3], fence = fence, host = ARGV[4], pid = tonumber(ARGV[5]), user = ARGV[6],
  cmd = ARGV[7], since = now, ttl = ttl, exp = now + ttl,
}))
redis.call('PEXPIRE', holders_key, ttl)
return {1, fence, now}
