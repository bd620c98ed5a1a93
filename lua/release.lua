-- release: give the lock up, by token ('token'), whoever holds it ('force'), or leave the queue
-- as a waiter that stops waiting ('leave', which also gives back a lock handed over meanwhile).
-- A token holding the lock more than once (re-entered by nested invocations) only counts down.
-- When the lock ends up with room and waiters are queued, the head, and as many behind it as
-- fit, are handed the lock with a short grant and woken; the first left waiting is woken too,
-- to watch those grants.
-- With a minimum hold (run --min-hold), a token release of a lock held for less than min_hold
-- keeps it until since + min_hold instead, so a late duplicate still finds it taken.
-- KEYS[1] holders hash, KEYS[2] fence counter, KEYS[3] queue hash, KEYS[4] the caller's wake list
-- ARGV[1] op, ARGV[2] token, ARGV[3] min_hold_ms, ARGV[4] waiter id, ARGV[5] grant_ms,
-- ARGV[6] wake list ttl_ms
-- Returns for 'token': 1 released, {2, kept_ms} kept for the minimum hold, {3, holds_left}
-- still held by outer invocations, 0 the token holds nothing (nothing changed); for 'force':
-- {now_ms, holder_json...} of the evicted holders; for 'leave': 1.
local holders_key, fence_key, queue_key, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, token, min_hold, waiter = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local grant, wake_ttl = tonumber(ARGV[5]), tonumber(ARGV[6])

local function foreign(key, what)
  return redis.error_reply('WRONGTYPE ' .. key .. ' ' .. what .. ' that redlock did not write')
end
for _, spec in ipairs({{holders_key, 'hash'}, {fence_key, 'string'}, {queue_key, 'hash'}, {wake_key, 'list'}}) do
  local found = redis.call('TYPE', spec[1])['ok']
  if found ~= 'none' and found ~= spec[2] then return foreign(spec[1], 'is a ' .. found) end
end
if redis.call('EXISTS', fence_key) == 1 and not string.match(redis.call('GET', fence_key), '^%d+$') then
  return foreign(fence_key, 'holds a value')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local function records(key)
  local fields, live, stale = redis.call('HGETALL', key), {}, {}
  for i = 1, #fields, 2 do
    local ok, record = pcall(cjson.decode, fields[i + 1])
    if not ok or type(record) ~= 'table' or type(record.exp) ~= 'number' then return nil end
    if record.exp > now then live[#live + 1] = {fields[i], record} else stale[#stale + 1] = fields[i] end
  end
  return live, stale
end
local holders, stale_holders = records(holders_key)
if holders == nil then return foreign(holders_key, 'holds a field') end
local queue, stale_queue = records(queue_key)
if queue == nil then return foreign(queue_key, 'holds a field') end
table.sort(queue, function(a, b) return a[2].seq < b[2].seq end)

local mine
for i, holder in ipairs(holders) do
  if holder[1] == token and token ~= '' then mine = i end
end
if op == 'token' and mine == nil then return 0 end

-- From here on, writes.
if #stale_holders > 0 then redis.call('HDEL', holders_key, unpack(stale_holders)) end
if #stale_queue > 0 then redis.call('HDEL', queue_key, unpack(stale_queue)) end

local reply = 1
if op == 'force' then
  reply = {now}
  for _, holder in ipairs(holders) do
    reply[#reply + 1] = cjson.encode(holder[2])
    redis.call('HDEL', holders_key, holder[1])
  end
  holders = {}
elseif op == 'leave' then
  for i, entry in ipairs(queue) do
    if entry[1] == waiter then
      redis.call('HDEL', queue_key, waiter)
      table.remove(queue, i)
      break
    end
  end
  redis.call('DEL', wake_key)
end
if mine and op ~= 'force' then
  local record = holders[mine][2]
  local keep_until = record.since + min_hold
  if op == 'token' and (record.count or 1) > 1 then
    record.count = record.count - 1
    redis.call('HSET', holders_key, token, cjson.encode(record))
    reply = {3, record.count}
  elseif op == 'token' and keep_until > now then
    record.exp, record.ttl = keep_until, keep_until - now
    redis.call('HSET', holders_key, token, cjson.encode(record))
    reply = {2, keep_until - now}
  else
    redis.call('HDEL', holders_key, token)
    table.remove(holders, mine)
  end
end

local function wake(id)
  local list = string.sub(queue_key, 1, -7) .. ':wake:' .. id
  redis.call('RPUSH', list, '1')
  redis.call('PEXPIRE', list, wake_ttl)
end

-- Whether the queue's head fits now (see acquire.lua).
local function head_fits()
  local entry = queue[1][2]
  if entry.mode == 'exclusive' then return #holders == 0 end
  if entry.mode == 'semaphore' then return #holders < entry.limit end
  for _, holder in ipairs(holders) do
    if holder[2].mode == 'exclusive' then return false end
  end
  return true
end

local granted = 0
while queue[1] and head_fits() do
  local id, entry = queue[1][1], queue[1][2]
  local record = {
    mode = entry.mode, limit = entry.limit, fence = redis.call('INCR', fence_key), host = entry.host,
    pid = entry.pid, user = entry.user, cmd = entry.cmd, since = now, ttl = grant, exp = now + grant,
    count = 1,
  }
  redis.call('HSET', holders_key, entry.tok, cjson.encode(record))
  holders[#holders + 1] = {entry.tok, record}
  redis.call('HDEL', queue_key, id)
  table.remove(queue, 1)
  wake(id)
  granted = granted + 1
end
if granted > 0 and queue[1] then wake(queue[1][1]) end

local function expire_by_latest(key, list)
  local latest = 0
  for _, item in ipairs(list) do
    if item[2].exp > latest then latest = item[2].exp end
  end
  if latest > now then redis.call('PEXPIRE', key, latest - now) else redis.call('DEL', key) end
end
expire_by_latest(holders_key, holders)
expire_by_latest(queue_key, queue)
return reply
