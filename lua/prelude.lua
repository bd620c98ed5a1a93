-- prelude: helpers shared by every script, prepended to each one when it is compiled in (a fixed
-- text, so each script keeps a fixed SHA). Everything here is local to the script.

-- An error reply for data at one of our key names that redlock did not write.
local function foreign(key, what)
  return redis.error_reply('WRONGTYPE ' .. key .. ' ' .. what .. ' that redlock did not write')
end

-- The error reply for a key that a read found of another type (TYPE is asked only then: every
-- call costs the server time, and scripts run on every acquisition).
local function wrong_type(key)
  return foreign(key, 'is a ' .. redis.call('TYPE', key)['ok'])
end

-- The server's clock, in ms.
local function server_now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Reads a hash of JSON records (holders or queue entries). Returns nil, the live {field,
-- record} pairs and the stale field names; or an error reply when the key is of another type
-- or a field is not a redlock record.
local function records(key, now)
  local ok, fields = pcall(redis.call, 'HGETALL', key)
  if not ok then return wrong_type(key) end
  local live, stale = {}, {}
  for i = 1, #fields, 2 do
    local decoded, record = pcall(cjson.decode, fields[i + 1])
    if not decoded or type(record) ~= 'table' or type(record.exp) ~= 'number' then
      return foreign(key, 'holds a field')
    end
    if record.exp > now then live[#live + 1] = {fields[i], record} else stale[#stale + 1] = fields[i] end
  end
  return nil, live, stale
end

-- Reads the fence counter. Returns nil and its last value (false before the first); or an
-- error reply when the key holds anything but an integer.
local function last_fence(key)
  local ok, value = pcall(redis.call, 'GET', key)
  if not ok then return wrong_type(key) end
  if value and not string.match(value, '^%d+$') then return foreign(key, 'holds a value') end
  return nil, value
end

-- Reads a lock for a script that may change it (KEYS[1..4]: holders, fence, queue, the caller's
-- wake list) and checks, before any write, every key the script may write: the hashes always,
-- the fence when `writes.fence` or when someone waits (a hand-off takes a fence), the wake list
-- when `writes.wake`. Returns nil and {now, holders, stale_holders, queue in arrival order,
-- stale_queue}; or an error reply when anything there is not redlock's.
local function read_lock(keys, writes)
  local lock, refused = {now = server_now()}, nil
  refused, lock.holders, lock.stale_holders = records(keys.holders, lock.now)
  if refused then return refused end
  refused, lock.queue, lock.stale_queue = records(keys.queue, lock.now)
  if refused then return refused end
  if writes.fence or #lock.queue > 0 then
    refused = last_fence(keys.fence)
    if refused then return refused end
  end
  if writes.wake then
    local found = redis.call('TYPE', keys.wake)['ok']
    if found ~= 'none' and found ~= 'list' then return foreign(keys.wake, 'is a ' .. found) end
  end
  table.sort(lock.queue, function(a, b) return a[2].seq < b[2].seq end)
  return nil, lock
end

-- Whether a request like `record` (mode, limit) is admitted now, with `ahead` entries of
-- `queue` before it: exclusive needs no holder and nobody ahead; shared needs no exclusive
-- holder and only shared waiters ahead (a queued writer holds back later readers); a semaphore
-- needs holders + waiters ahead < its limit.
local function admitted(record, ahead, holders, queue)
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

-- Pushes `message` onto a waiter's wake list. Its name comes from the queue key (same hash
-- tag, so the same Cluster slot): the caller cannot know which waiter to pass in KEYS.
local function wake(queue_key, id, message, wake_ttl)
  local list = string.sub(queue_key, 1, -7) .. ':wake:' .. id
  redis.call('RPUSH', list, message)
  redis.call('PEXPIRE', list, wake_ttl)
end

-- Sets the PEXPIRE of a hash to its latest record expiry. `list` holds every live record left
-- in it; when it is empty every field has been deleted (stale ones included), and with the last
-- field Redis deleted the hash.
local function expire_by_latest(key, list, now)
  local latest = 0
  for _, item in ipairs(list) do
    if item[2].exp > latest then latest = item[2].exp end
  end
  if latest > now then redis.call('PEXPIRE', key, latest - now) end
end

-- Hands room to the queue's head, and to as many behind it as are admitted too (a run of
-- readers, the next permits of a semaphore), each with a short grant and a fence of its own;
-- stops at `stop_at` (the caller's waiter id). Tells each one 'g:<fence>:<grant expiry>', and
-- the first left waiting 'w:<earliest holder expiry>:<queue length>:<first holder's record>'
-- so it watches those grants without a script call of its own. Updates `holders` and `queue`;
-- returns how many were handed the lock.
local function hand_off(keys, holders, queue, now, grant, wake_ttl, stop_at)
  local granted = 0
  while queue[1] and queue[1][1] ~= stop_at and admitted(queue[1][2], 0, holders, queue) do
    local id, entry = queue[1][1], queue[1][2]
    local record = {
      mode = entry.mode, limit = entry.limit, fence = redis.call('INCR', keys.fence), host = entry.host,
      pid = entry.pid, user = entry.user, cmd = entry.cmd, since = now, ttl = grant, exp = now + grant,
      count = 1,
    }
    redis.call('HSET', keys.holders, entry.tok, cjson.encode(record))
    holders[#holders + 1] = {entry.tok, record}
    redis.call('HDEL', keys.queue, id)
    table.remove(queue, 1)
    wake(keys.queue, id, 'g:' .. record.fence .. ':' .. record.exp, wake_ttl)
    granted = granted + 1
  end
  if granted > 0 and queue[1] and queue[1][1] ~= stop_at then
    local earliest = holders[1][2].exp
    for _, holder in ipairs(holders) do
      if holder[2].exp < earliest then earliest = holder[2].exp end
    end
    wake(keys.queue, queue[1][1],
      'w:' .. earliest .. ':' .. #queue .. ':' .. cjson.encode(holders[1][2]), wake_ttl)
  end
  return granted
end
