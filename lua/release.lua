-- release: give the lock up, by token ('token'), whoever holds it ('force'), or leave the queue
-- as a waiter that stops waiting ('leave', which also gives back a lock handed over meanwhile).
-- A token holding the lock more than once (re-entered by nested invocations) only counts down.
-- With a minimum hold (run --min-hold), a token release of a lock held for less than min_hold
-- keeps it until since + min_hold instead, so a late duplicate still finds it taken.
-- Then, while the queue's head is admitted, the lock is handed to it (see the prelude).
-- KEYS[1] holders hash, KEYS[2] fence counter, KEYS[3] queue hash, KEYS[4] the caller's wake list
-- ARGV[1] op, ARGV[2] token, ARGV[3] min_hold_ms, ARGV[4] waiter id, ARGV[5] grant_ms,
-- ARGV[6] wake list ttl_ms
-- Returns for 'token': 1 released, {2, kept_ms} kept for the minimum hold, {3, holds_left}
-- still held by outer invocations, 0 the token holds nothing (nothing changed); for 'force':
-- {now_ms, holder_json...} of the evicted holders; for 'leave': 1.
local keys = {holders = KEYS[1], fence = KEYS[2], queue = KEYS[3], wake = KEYS[4]}
local op, token, min_hold, waiter = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local grant, wake_ttl = tonumber(ARGV[5]), tonumber(ARGV[6])

local refused, lock = read_lock(keys, {wake = op == 'leave'})
if refused then return refused end
local now, holders, stale_holders = lock.now, lock.holders, lock.stale_holders
local queue, stale_queue = lock.queue, lock.stale_queue

local mine
for i, holder in ipairs(holders) do
  if holder[1] == token and token ~= '' then mine = i end
end
if op == 'token' and mine == nil then return 0 end

-- From here on, writes.
if #stale_holders > 0 then redis.call('HDEL', keys.holders, unpack(stale_holders)) end
if #stale_queue > 0 then redis.call('HDEL', keys.queue, unpack(stale_queue)) end

local reply = 1
if op == 'force' then
  reply = {now}
  for _, holder in ipairs(holders) do
    reply[#reply + 1] = cjson.encode(holder[2])
    redis.call('HDEL', keys.holders, holder[1])
  end
  holders = {}
elseif op == 'leave' then
  for i, entry in ipairs(queue) do
    if entry[1] == waiter then
      redis.call('HDEL', keys.queue, waiter)
      table.remove(queue, i)
      break
    end
  end
  redis.call('DEL', keys.wake)
end
if mine and op ~= 'force' then
  local record = holders[mine][2]
  local keep_until = record.since + min_hold
  if op == 'token' and (record.count or 1) > 1 then
    record.count = record.count - 1
    redis.call('HSET', keys.holders, token, cjson.encode(record))
    reply = {3, record.count}
  elseif op == 'token' and keep_until > now then
    record.exp, record.ttl = keep_until, keep_until - now
    redis.call('HSET', keys.holders, token, cjson.encode(record))
    reply = {2, keep_until - now}
  else
    redis.call('HDEL', keys.holders, token)
    table.remove(holders, mine)
  end
end

hand_off(keys, holders, queue, now, grant, wake_ttl, nil)
expire_by_latest(keys.holders, holders, now)
expire_by_latest(keys.queue, queue, now)
return reply
