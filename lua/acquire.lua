-- acquire: take the lock, claim a lock handed over to the caller, or join / refresh the FIFO
-- queue. Nobody barges: a free lock goes to the queue's head first.
-- KEYS[1] holders hash, KEYS[2] fence counter, KEYS[3] queue hash, KEYS[4] the caller's wake list
-- ARGV[1] token, ARGV[2] ttl_ms, ARGV[3] mode, ARGV[4] host, ARGV[5] pid, ARGV[6] user,
-- ARGV[7] command, ARGV[8] waiter id ('' = fail fast, never queue), ARGV[9] '1' = only if the
-- caller is still queued or was handed the lock, ARGV[10] queue entry ttl_ms, ARGV[11] grant_ms,
-- ARGV[12] wake list ttl_ms
-- Returns {1, fence, now_ms} when acquired; {0, now_ms, holder_json or false, position, length,
-- hint_ms} when not (position 0: not queued; hint: when something may change by itself);
-- {-1, now_ms} when ARGV[9] is set and the caller is neither queued nor handed the lock.
-- Every check happens before the first write, so an error reply leaves Redis untouched.
local holders_key, fence_key, queue_key, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, waiter = ARGV[1], tonumber(ARGV[2]), ARGV[8]
local queued_only, entry_ttl, grant = ARGV[9] == '1', tonumber(ARGV[10]), tonumber(ARGV[11])
local wake_ttl = tonumber(ARGV[12])

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

-- Read everything first: live holders (the caller's own grant apart), live queue in order.
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

local mine, position
for i, holder in ipairs(holders) do
  if holder[1] == token then mine = i end
end
for i, entry in ipairs(queue) do
  if entry[1] == waiter and waiter ~= '' then position = i end
end
if queued_only and mine == nil and position == nil then return {-1, now} end

-- From here on, writes.
if #stale_holders > 0 then redis.call('HDEL', holders_key, unpack(stale_holders)) end
if #stale_queue > 0 then redis.call('HDEL', queue_key, unpack(stale_queue)) end

local function expire_by_latest(key, list, extra)
  local latest = extra or 0
  for _, item in ipairs(list) do
    if item[2].exp > latest then latest = item[2].exp end
  end
  if latest > now then redis.call('PEXPIRE', key, latest - now) else redis.call('DEL', key) end
end

local function wake(id)
  local list = string.sub(queue_key, 1, -7) .. ':wake:' .. id
  redis.call('RPUSH', list, '1')
  redis.call('PEXPIRE', list, wake_ttl)
end

local function take(record)
  redis.call('HSET', holders_key, token, cjson.encode(record))
  if position then
    redis.call('HDEL', queue_key, waiter)
    table.remove(queue, position)
  end
  redis.call('DEL', wake_key)
  expire_by_latest(holders_key, holders, record.exp)
  expire_by_latest(queue_key, queue)
  return {1, record.fence, now}
end

if mine then
  -- Handed over by a release while we waited: turn the short grant into a full lease.
  local record = holders[mine][2]
  record.exp, record.ttl = now + ttl, ttl
  holders[mine][2] = record
  return take(record)
end

if #holders == 0 and (#queue == 0 or position == 1) then
  return take({
    mode = ARGV[3], fence = redis.call('INCR', fence_key), host = ARGV[4], pid = tonumber(ARGV[5]),
    user = ARGV[6], cmd = ARGV[7], since = now, ttl = ttl, exp = now + ttl,
  })
end

if #holders == 0 then
  -- Free, but the head has not taken it (it may be dead): hand it over with a short grant,
  -- and wake the one behind it to watch that grant.
  local id, entry = queue[1][1], queue[1][2]
  local record = {
    mode = entry.mode, fence = redis.call('INCR', fence_key), host = entry.host, pid = entry.pid,
    user = entry.user, cmd = entry.cmd, since = now, ttl = grant, exp = now + grant,
  }
  redis.call('HSET', holders_key, entry.tok, cjson.encode(record))
  redis.call('PEXPIRE', holders_key, grant)
  redis.call('HDEL', queue_key, id)
  table.remove(queue, 1)
  holders = {{entry.tok, record}}
  wake(id)
  if position then position = position - 1 end
  if queue[1] and queue[1][1] ~= waiter then wake(queue[1][1]) end
end

if waiter ~= '' then
  local entry
  if position then
    entry = queue[position][2]
  else
    local last = queue[#queue]
    entry = {
      id = waiter, tok = token, seq = last and last[2].seq + 1 or 1, mode = ARGV[3], host = ARGV[4],
      pid = tonumber(ARGV[5]), user = ARGV[6], cmd = ARGV[7], since = now,
    }
    queue[#queue + 1] = {waiter, entry}
    position = #queue
  end
  entry.exp = now + entry_ttl
  redis.call('HSET', queue_key, waiter, cjson.encode(entry))
end
expire_by_latest(queue_key, queue)

local latest = now
for _, holder in ipairs(holders) do
  if holder[2].exp > latest then latest = holder[2].exp end
end
-- The first two in line watch the holder's expiry; the rest only refresh their entry.
local hint = math.floor(entry_ttl / 3)
if position and position <= 2 then hint = math.min(hint, latest - now) end
return {0, now, holders[1] and cjson.encode(holders[1][2]) or false, position or 0, #queue, hint}
