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
local keys = {holders = KEYS[1], fence = KEYS[2], queue = KEYS[3], wake = KEYS[4]}
local token, ttl, mode, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local waiter, queued_only, reenter = ARGV[9], ARGV[10] == '1', ARGV[14] == '1'
local entry_ttl, grant, wake_ttl = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])

local refused, lock = read_lock(keys, {fence = true, wake = waiter ~= ''})
if refused then return refused end
local now, holders, stale_holders = lock.now, lock.holders, lock.stale_holders
local queue, stale_queue = lock.queue, lock.stale_queue

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

-- From here on, writes.
if #stale_holders > 0 then redis.call('HDEL', keys.holders, unpack(stale_holders)) end
if #stale_queue > 0 then redis.call('HDEL', keys.queue, unpack(stale_queue)) end

local function admit_heads()
  local granted = hand_off(keys, holders, queue, now, grant, wake_ttl, position and waiter)
  if position then position = position - granted end
end

local function acquired(record)
  redis.call('HSET', keys.holders, token, cjson.encode(record))
  if position then
    redis.call('HDEL', keys.queue, waiter)
    table.remove(queue, position)
    position = nil
  end
  -- Wake-ups left for a waiter that is done waiting (a fail-fast caller has no wake list).
  if waiter ~= '' then redis.call('DEL', keys.wake) end
  admit_heads()
  expire_by_latest(keys.holders, holders, now)
  expire_by_latest(keys.queue, queue, now)
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

admit_heads()
if admitted({mode = mode, limit = limit}, (position or #queue + 1) - 1, holders, queue) then
  local record = {
    mode = mode, limit = limit, fence = redis.call('INCR', keys.fence), host = ARGV[5],
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
    -- A new place: wake-ups left from an earlier one (a lapsed grant) mean nothing now.
    redis.call('DEL', keys.wake)
    entry = {
      id = waiter, tok = token, seq = last and last[2].seq + 1 or 1, mode = mode, limit = limit,
      host = ARGV[5], pid = tonumber(ARGV[6]), user = ARGV[7], cmd = ARGV[8], since = now,
    }
    queue[#queue + 1] = {waiter, entry}
    position = #queue
  end
  entry.exp = now + entry_ttl
  redis.call('HSET', keys.queue, waiter, cjson.encode(entry))
end
expire_by_latest(keys.queue, queue, now)

-- The first two in line watch the earliest expiry among the holders; the rest only refresh.
local earliest
for _, holder in ipairs(holders) do
  if earliest == nil or holder[2].exp < earliest then earliest = holder[2].exp end
end
local hint = math.floor(entry_ttl / 3)
if position and position <= 2 and earliest then hint = math.min(hint, earliest - now) end
return {0, now, holders[1] and cjson.encode(holders[1][2]) or false, position or 0, #queue, hint}
