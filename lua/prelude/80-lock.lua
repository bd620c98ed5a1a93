-- A lock opened and settled: the reads and checks a script makes before it knows what it will do,
-- its first writes, and its last ones.
-- (lua/prelude/ is joined in file-name order, then a script's own file: see lua/README.md.)

-- Reads the counts of a lock's keys and checks them. `key` holds holders and leases, and queue
-- and waiters unless the script never touches the queue. The fence is checked when
-- `reads.fence` or when someone waits (a hand-off takes a fence), the caller's wake list when
-- `reads.wake`. `reads.free`: the lock is likely free and nobody waits (a first acquisition
-- call): one EXISTS of the four keys of the holders and the queue then stands for their reads
-- when none is there, and for the queue's when only the holders' are; `reads.unqueued`:
-- nobody is likely to wait (a release): one EXISTS stands for the queue's two reads when
-- neither key is there. (Where a key is likely there, an EXISTS would only add a call.) Returns nil and the lock (now, now_us, length: the queue's, last_fence when read,
-- holders: the holders hash's length); or an error reply when anything there is not
-- redlock's. Nothing is written: the writes are checked (check_writes) once the script knows
-- what it will do.
local function open_lock(key, reads)
  local lock = {key = key, budget = SCAN_BUDGET, dead = {}, length = 0, holders = 0}
  lock.now, lock.now_us = server_clock()
  local refused, leases, queued, waiters = nil, 0, nil, nil
  -- (A key that is not there is of no type: nothing to check, and its count is 0; Redis
  -- deletes an empty hash or sorted set, so a count above 0 is a key that is there.)
  local present = reads.free and key.queue and
    existing(key.holders, key.leases, key.queue, key.waiters)
  if present ~= 0 then
    refused, lock.holders = read(key.holders, 'HLEN', key.holders)
    if refused then return refused end
    refused, leases = read(key.leases, 'ZCARD', key.leases)
    if refused then return refused end
    if lock.holders ~= leases then
      refused = reconcile_holders(lock)
      if refused then return refused end
    else
      lock.indexed = leases
    end
  else
    lock.indexed = 0
  end
  local queue_present
  if key.queue and present then
    queue_present = present - (lock.holders > 0 and 1 or 0) - (leases > 0 and 1 or 0)
  elseif key.queue and reads.unqueued then
    queue_present = existing(key.queue, key.waiters)
  end
  if key.queue and queue_present ~= 0 then
    refused, queued = read(key.queue, 'ZCARD', key.queue)
    if refused then return refused end
    refused, waiters = read(key.waiters, 'HLEN', key.waiters)
    if refused then return refused end
    if waiters > queued then
      refused = reconcile_queue(lock)
      if refused then return refused end
    end
    lock.length = queued
  end
  if reads.fence or lock.length > 0 then
    local value
    refused, value = read(key.fence, 'GET', key.fence)
    if refused then return refused end
    if value and not string.match(value, '^%d+$') then return foreign(key.fence, 'holds a value') end
    if value and tonumber(value) >= MAX_FENCE then
      return redis.error_reply('FENCE ' .. key.fence .. ' is at its maximum; delete it if no resource checks the fences of this lock')
    end
    lock.last_fence = value
  end
  if key.history then
    refused, lock.history_count = read(key.history, 'ZCARD', key.history)
    if refused then return refused end
  end
  if reads.wake then
    local found = redis.call('TYPE', key.wake)['ok']
    if found ~= 'none' and found ~= 'list' then return foreign(key.wake, 'is a ' .. found) end
  end
  if lock.holders == 0 then lock.live = 0 end
  -- Every lease is known (none, or all this script writes): settle needs no read for the
  -- latest one.
  if lock.holders == 0 and lock.indexed == 0 and not lock.fix then lock.latest = 0 end
  return nil, lock
end

-- The first writes of a script: the repairs reconcile_* planned, up to PURGE_CHUNK expired
-- holders, and the dead entries found at the head.
local function begin_writes(lock)
  local key, fix = lock.key, lock.fix
  if fix then
    for i = 1, #fix.drop, 1000 do
      redis.call('ZREM', key.leases, unpack(fix.drop, i, math.min(i + 999, #fix.drop)))
    end
    for i = 1, #fix.add, 1000 do
      redis.call('ZADD', key.leases, unpack(fix.add, i, math.min(i + 999, #fix.add)))
    end
    lock.fix, lock.holders_changed = nil, true
  end
  if lock.orphans then
    for i = 1, #lock.orphans, 1000 do
      redis.call('HDEL', key.waiters, unpack(lock.orphans, i, math.min(i + 999, #lock.orphans)))
    end
    lock.queue_written = true
    lock.orphans = nil
  end
  if key.queue then
    purge_holders(lock)
    drop_dead(lock)
  end
end

-- Gives the keys written their expiry: the holders hash and the leases set expire together at
-- the latest lease (so Redis removes the lock when its last holder's lease ends); the queue and
-- its entries at least QUEUE_SLACK_MS after the latest entry written (never earlier than
-- before: other entries may live longer); the history its retention's time after its last
-- change, trimmed to its retention's count of entries (HISTORY_CAP and HISTORY_TTL_MS unless
-- the entry last written says otherwise).
local function settle(lock)
  local key = lock.key
  if lock.history_written then
    local cap, ttl = retention(lock.history_kept)
    -- At most HISTORY_TRIM per call (unpack takes a few thousand values at most, and a call's
    -- work stays bounded): redlock adds fewer per call, so only an excess added by hand (or a
    -- retention made smaller) outlives a call, and the next calls remove the rest.
    local over = math.min(lock.history_count - cap, HISTORY_TRIM)
    if over > 0 then
      redis.call('ZREM', key.history, unpack(redis.call('ZRANGE', key.history, 0, over - 1)))
      lock.history_count = lock.history_count - over
    end
    redis.call('PEXPIRE', key.history, int(ttl))
  end
  if lock.holders_changed then
    -- The latest lease: known when every lease is this script's (0: none left), else read.
    local latest = lock.latest
    if latest == nil then
      latest = tonumber(redis.call('ZRANGE', key.leases, -1, -1, 'WITHSCORES')[2])
    elseif latest == 0 then
      latest = nil
    end
    if latest then
      -- (After the first write: a lease someone wrote by hand, in a record or as a score, is
      -- brought within what a call can write, so that PEXPIREAT cannot fail on it; one that
      -- has passed ends the keys now.)
      latest = int(math.max(1, math.min(math.floor(latest), lock.now + LONGEST_LEASE_MS)))
      redis.call('PEXPIREAT', key.holders, latest)
      redis.call('PEXPIREAT', key.leases, latest)
    end
  end
  -- (A queue that emptied is gone: Redis deleted its keys.)
  if lock.queue_written and (lock.queue_until or (lock.length or 0) > 0) then
    -- Each key of the queue lives until queue_until at least (never less than it had: other
    -- entries may live longer), and a key that had no expiry (written by hand) gets one.
    local keep_until = lock.queue_until
    for _, name in ipairs({key.queue, key.waiters}) do
      local left = redis.call('PTTL', name)
      if left == -1 then
        redis.call('PEXPIREAT', name, int((keep_until or lock.now + QUEUE_ENTRY_TTL_MS) + QUEUE_SLACK_MS))
      elseif keep_until and left >= 0 and lock.now + left < keep_until then
        redis.call('PEXPIREAT', name, int(keep_until + QUEUE_SLACK_MS))
      end
    end
  end
end

