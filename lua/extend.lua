-- extend: reset the expiry of a live holder; never re-creates an expired or foreign lock.
-- KEYS[1] holders hash
-- ARGV[1] token, ARGV[2] ttl_ms
-- Returns {1, now_ms} when extended, {0, now_ms} when the token holds nothing.
local holders_key = KEYS[1]
local token, ttl = ARGV[1], tonumber(ARGV[2])

local now = server_now()
local refused, holders = records(holders_key, now)
if refused then return refused end

local mine
for _, holder in ipairs(holders) do
  if holder[1] == token then mine = holder[2] end
end
if mine == nil then return {0, now} end

mine.exp, mine.ttl = now + ttl, ttl
redis.call('HSET', holders_key, token, cjson.encode(mine))
expire_by_latest(holders_key, holders, now)
return {1, now}
