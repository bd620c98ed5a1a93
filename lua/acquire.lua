-- acquire: take the lock, claim a lock handed over to the caller, re-enter a lock the caller's
-- token already holds, or join / refresh the FIFO queue. Nobody barges: free room goes to the
-- queue's head first.
-- KEYS[1] holders hash, KEYS[2] fence counter, KEYS[3] queue hash, KEYS[4] the caller's wake list
-- ARGV[1] token, ARGV[2] ttl_ms, ARGV[3] mode ('exclusive', 'shared' or 'semaphore'),
-- ARGV[4] limit (semaphore; else 0), ARGV[5] host, ARGV[6] pid, ARGV[7] user, ARGV[8] command,
-- ARGV[9] waiter id ('' = fail fast, never queue), ARGV[10] '1' = only if the caller is still
-- queued or was handed the lock, ARGV[11] queue entry ttl_ms, ARGV[12] grant_ms,
-- ARGV[13] wake list ttl_ms, ARGV[14] '1' = re-enter: the token already holds the lock
-- Returns {1, fence, now_ms} when acquired (or re-entered); {0, now_ms, holder_json or false,
-- position, length, hint_ms} when not (position 0: not queued; hint: when something may change
-- without a wake-up); {-1, now_ms} when ARGV[10] is set and the caller is neither queued nor
-- handed the lock; {-2, now_ms} when re-entering with a token that does not hold the lock.
-- Every check happens before the first write, so an error reply leaves Redis untouched.
local holders_key, fence_key, queue_key, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, mode, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local waiter, queued_only, reenter = ARGV[9], ARGV[10] == '1', ARGV[14] == '1'
local entry_ttl, grant, wake_ttl = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])

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

-- A lock is either a read/write lock (exclusive and shared holders) or a semaphore of N.
local function kind(record)
  if record.mode == 'semaphore' then return 'a semaphore of ' .. record.limit end
  return 'an exclusive/shared lock'
end
local wanted = kind({mode = mode, limit = limit})
for _, list in ipairs({holders, queue}) do
  for _, item in ipairs(list) do
    if kind(item[2]) ~= wanted then
      return redis.error_reply('MODE the lock is ' .. kind(item[2]) .. ', not ' .. wanted .. '; nothing was changed')
    end
  end
end

local mine, position
for i, holder in ipairs(holders) do
  if holder[1] == token then mine = i end
end
for i, entry in ipairs(queue) do
  if entry[1] == waiter and waiter ~= '' then position = i end
end
if reenter and mine == nil then return {-2, now} end
if reenter and mode == 'exclusive' and holders[mine][2].mode == 'shared' then
  return redis.error_reply('MODE the lock is held shared by this token; it cannot be re-entered exclusively')
end
if queued_only and mine == nil and position == nil then return {-1, now} end

-- Whether a request of `record`'s mode fits now, with `ahead` queued before it.
local function fits(record, ahead)
  if record.mode == 'exclusive' then return #holders == 0 and ahead == 0 end
  if record.mode == 'semaphore' then return #holders + ahead < record.limit end
  for _, holder in ipairs(holders) do
    if holder[2].mode == 'exclusive' then return false end
  end
  for i = 1, ahead do
    if queue[i][2].mode ~= 'shared' then return false end
  end
  return true
end

-- From here on, writes.
if #stale_holders > 0 then redis.call('HDEL', holders_key, unpack(stale_holders)) end
if #stale_queue > 0 then redis.call('HDEL', queue_key, unpack(stale_queue)) end

local function wake(id)
  local list = string.sub(queue_key, 1, -7) .. ':wake:' .. id
  redis.call('RPUSH', list, '1')
  redis.call('PEXPIRE', list, wake_ttl)
end

-- Hands room to the queue's head, and to as many behind it as fit (a run of readers, the next
-- permits of a semaphore), each with a short grant; stops at the caller. Wakes each one, and
-- the first left waiting, to watch those grants.
local function hand_off()
  local granted = 0
  while queue[1] and queue[1][1] ~= waiter and fits(queue[1][2], 0) do
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
    if position then position = position - 1 end
    wake(id)
    granted = granted + 1
  end
  if granted > 0 and queue[1] and queue[1][1] ~= waiter then wake(queue[1][1]) end
end

local function expire_by_latest(key, list)
  local latest = 0
  for _, item in ipairs(list) do
    if item[2].exp > latest then latest = item[2].exp end
  end
  if latest > now then redis.call('PEXPIRE', key, latest - now) else redis.call('DEL', key) end
end

local function acquired(record)
  redis.call('HSET', holders_key, token, cjson.encode(record))
  if position then
    redis.call('HDEL', queue_key, waiter)
    table.remove(queue, position)
    position = nil
  end
  redis.call('DEL', wake_key)
  hand_off()
  expire_by_latest(holders_key, holders)
  expire_by_latest(queue_key, queue)
  return {1, record.fence, now}
end

if mine then
  local record = holders[mine][2]
  if reenter then
    -- A nested invocation: one more hold on the same lease.
    record.count = (record.count or 1) + 1
    if now + ttl > record.exp then record.exp, record.ttl = now + ttl, ttl end
  else
    -- Handed over while we waited: turn the short grant into a full lease.
    record.exp, record.ttl = now + ttl, ttl
  end
  return acquired(record)
end

hand_off()
if fits({mode = mode, limit = limit}, (position or #queue + 1) - 1) then
  local record = {
    mode = mode, limit = limit, fence = redis.call('INCR', fence_key), host = ARGV[5],
    pid = tonumber(ARGV[6]), user = ARGV[7], cmd = ARGV[8], since = now, ttl = ttl, exp = now + ttl,
    count = 1,
  }
  holders[#holders + 1] = {token, record}
  return acquired(record)
end

if waiter ~= '' then
  local entry
  if position then
    entry = queue[position][2]
  else
    local last = queue[#queue]
    entry = {
      id = waiter, tok = token, seq = last and last[2].seq + 1 or 1, mode = mode, limit = limit,
      host = ARGV[5], pid = tonumber(ARGV[6]), user = ARGV[7], cmd = ARGV[8], since = now,
    }
    queue[#queue + 1] = {waiter, entry}
    position = #queue
  end
  entry.exp = now + entry_ttl
  redis.call('HSET', queue_key, waiter, cjson.encode(entry))
end
expire_by_latest(queue_key, queue)

-- The first two in line watch the earliest expiry among the holders; the rest only refresh.
local earliest
for _, holder in ipairs(holders) do
  if earliest == nil or holder[2].exp < earliest then earliest = holder[2].exp end
end
local hint = math.floor(entry_ttl / 3)
if position and position <= 2 and earliest then hint = math.min(hint, earliest - now) end
return {0, now, holders[1] and cjson.encode(holders[1][2]) or false, position or 0, #queue, hint}
