-- refresh: keep a waiter's queue entry alive, reading nothing but that entry and its place.
-- Returns (codes: REPLY.refresh, below) {queued, now_ms, position, length} when
-- refreshed; {not_queued, now_ms} when the waiter is not queued (any more): it was handed the
-- lock (see its wake list, or call acquire to claim it), or its entry expired.

-- The status code that opens the reply, by name (REPLY.refresh.<name>): only the number crosses
-- to redlock, which names the same codes (src/lock/reply.rs: a test compares the two).
local REPLY = {
  refresh = {queued = 1, not_queued = 0},
}
local refused, key, arg = inputs(2, 2,
  {queue = KEYS[1], waiters = KEYS[2]},
  {waiter = ARGV[1], entry_ttl_ms = ARGV[2]})
if refused then return refused end
local lock = {key = key, now = server_now()}

local json, rank
refused, json = read(key.waiters, 'HGET', key.waiters, arg.waiter)
if refused then return refused end
local entry = decode_entry(json)
if json and not entry then return foreign(key.waiters, 'holds a field') end
if entry == nil or entry.exp <= lock.now then return {REPLY.refresh.not_queued, lock.now} end
refused, rank = read(key.queue, 'ZRANK', key.queue, arg.waiter)
if refused then return refused end
if not rank then return foreign(key.waiters, 'holds a field') end
-- The writes below, as questions (first_denied).
local function place_writes(ask, queue_keys)
  return ask('HSET', queue_keys.waiters, 'f', 'v') and ask('PEXPIREAT', queue_keys.waiters, '1')
    and ask('PEXPIREAT', queue_keys.queue, '1')
end
refused = first_denied(place_writes, key)
if refused then return refused end

-- From here on, writes.
-- Near the head, the short head lease (see lease_head in the prelude).
local entry_ttl = tonumber(arg.entry_ttl_ms)
entry.exp = lock.now + entry_life(rank + 1, entry_ttl)
-- Behind the first places, its next call is its next refresh (see lease_head).
entry.due = lock.now + math.floor(entry_ttl / 3)
put_entry(lock, arg.waiter, entry, lock.now + entry_ttl)
settle(lock)
return {REPLY.refresh.queued, lock.now, rank + 1, redis.call('ZCARD', key.queue)}
