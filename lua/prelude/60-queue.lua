-- The queue: waiters in order of arrival, their entries, the head lease that drops dead waiters
-- near the head, and the wake lists that tell waiters of their turn.
-- (lua/prelude/ is joined in file-name order, then a script's own file: see lua/README.md.)

-- Queue entries examined per call while looking for the first live one (dead ones at the head
-- are dropped as they are found).
local SCAN_BUDGET = 1000

-- Extra life given to the queue keys beyond their latest entry, so a busy queue resets their
-- expiry about once a second, not on every refresh.
local QUEUE_SLACK_MS = 1000

-- How long a queue entry lives unless its waiter calls again (QUEUE_ENTRY_TTL in
-- src/lock/mod.rs; a test compares them): the queue's keys live that long past a change when
-- they had no expiry (written by hand) and the script knows of no later entry.
local QUEUE_ENTRY_TTL_MS = 120000

-- The first HEAD_PLACES places of a queue hold a short *head lease*: their entries live
-- HEAD_TTL_MS past their waiter's last call (a live waiter there calls every third of it), so a
-- waiter that died near the head (kill -9, a give-up that could not reach Redis) is dropped
-- within seconds instead of after the entry ttl, and is never handed the lock after that. An
-- entry moving into those places is shortened and its waiter woken (lease_head).
local HEAD_PLACES = 8
local HEAD_TTL_MS = 3000

-- A server stall (SIGSTOP, CLIENT PAUSE, DEBUG SLEEP) lapses every head lease at once, the live
-- waiters' too. So a lapsed entry is dropped only by a *steady* waiter: one whose own entry was
-- live at its call and has been so for at least HEAD_TTL_MS (entry field `steady`: when its
-- current run of timely calls began), which every live waiter becomes again within a head
-- lease of the stall's end; a waiter whose own entry lapsed keeps its place and calls again.
-- Anyone drops an entry lapsed for REAP_GRACE_MS. Until dropped, a lapsed entry counts as
-- live: handed the lock, it costs the queue one grant.
local REAP_GRACE_MS = 60000

-- A steady waiter that drops lapsed entries at the head gives the head lease to the places
-- ahead of it too, up to this many (lease_head), and calls again when they lapse: a run of
-- dead waiters longer than the head costs one head lease, not one per head's worth of them.
local AHEAD_PLACES = 64

-- A waiter that starts on its grant without a call (`run`) takes the grant's wake-up off its
-- list at once when it is alive and blocked there (Redis serves a blocked client right after
-- the script that pushed to its list). A grant whose wake-up is still in the list HEAR_MS after
-- it was made went to a waiter that was not listening (killed, most often): the next call
-- that sees it deletes the list and the grant together, and the lock passes on (see
-- unheard_grant). The waiter can then never take that grant: the wake-up is gone, and its own
-- call would find neither the grant nor its place. A waiter that polls instead of blocking
-- (its user may not BLPOP) claims its grant by a call: every 500 ms plus a round trip, so
-- over a link slower than about 100 ms it may lose a grant (and queue again), as a polling
-- `acquire` may lose its claim grant. (A failover to a replica that had the grant but not yet
-- the waiter's pop would take back a grant in use: the two are one event loop apart.)
local HEAR_MS = 600

-- The queue set is the truth for who waits, the waiters hash holds their entries. An entry
-- without a place (the set was deleted by hand, to empty the queue) is dropped by
-- begin_writes; a place without an entry is a dead waiter, dropped when it reaches the head.
-- Returns an error reply when a field is not redlock's.
local function reconcile_queue(lock)
  local key, placed, orphans = lock.key, {}, {}
  for _, id in ipairs(redis.call('ZRANGE', key.queue, 0, -1)) do placed[id] = true end
  local fields = redis.call('HGETALL', key.waiters)
  for i = 1, #fields, 2 do
    if not decode_entry(fields[i + 1]) then return foreign(key.waiters, 'holds a field') end
    if not placed[fields[i]] then orphans[#orphans + 1] = fields[i] end
  end
  lock.orphans = orphans
  return nil
end

-- The first live entry of the queue: nil and {id, entry}, or nil when the queue holds none
-- (or when the budget ran out first: then lock.head_unknown); or an error reply for an entry
-- redlock did not write. Dead entries found on the way are noted in lock.dead (the front of
-- the queue, still in Redis until drop_dead). Cached until the queue's head changes.
local function peek_head(lock)
  if lock.head ~= nil then return nil, lock.head or nil end
  if lock.length == 0 then
    lock.head = false
    return nil, nil
  end
  local key, batch = lock.key, 1
  while true do
    if lock.budget <= 0 then
      lock.head_unknown = true
      return nil, nil
    end
    local from = #lock.dead
    local ids = redis.call('ZRANGE', key.queue, from, from + math.min(batch, lock.budget) - 1)
    if not ids[1] then
      lock.head = false
      return nil, nil
    end
    lock.budget = lock.budget - #ids
    local values = redis.call('HMGET', key.waiters, unpack(ids))
    for i, id in ipairs(ids) do
      local entry = decode_entry(values[i])
      if values[i] and not entry then return foreign(key.waiters, 'holds a field'), nil end
      local dead = entry == nil or (entry.exp <= lock.now and
        (lock.reaps or entry.exp + REAP_GRACE_MS <= lock.now))
      if not dead then
        lock.head = {id, entry}
        return nil, lock.head
      end
      lock.dead[#lock.dead + 1] = id
    end
    batch = math.min(batch * 8, 512)
  end
end

-- Removes a queue entry.
local function remove_entry(lock, id)
  if redis.call('ZREM', lock.key.queue, id) == 1 then lock.length = lock.length - 1 end
  redis.call('HDEL', lock.key.waiters, id)
  lock.queue_written = true
  if lock.head and lock.head[1] == id then lock.head = nil end
end

-- Removes the dead entries peek_head found at the head (a write).
local function drop_dead(lock)
  if lock.dead[1] then
    redis.call('ZREM', lock.key.queue, unpack(lock.dead))
    redis.call('HDEL', lock.key.waiters, unpack(lock.dead))
    lock.queue_written = true
    lock.length = lock.length - #lock.dead
    lock.dead = {}
  end
end

-- Writes a queue entry (new or refreshed). The queue's keys live at least until `keep_until`
-- (the caller's call plus the full entry ttl, even for a short head lease: a stall that lapses
-- the head leases must not take the whole queue with them).
local function put_entry(lock, id, entry, keep_until)
  redis.call('HSET', lock.key.waiters, id, cjson.encode(entry))
  lock.queue_written = true
  if not lock.queue_until or keep_until > lock.queue_until then lock.queue_until = keep_until end
end

-- Pushes `message` onto waiter `id`'s wake list (see wake_key). Under pcall: foreign data at
-- that name is left alone, and that waiter learns its news from its next call instead.
local function wake(lock, id, message, wake_ttl)
  local list = wake_key(lock.key, id)
  if pcall(redis.call, 'RPUSH', list, message) then redis.call('PEXPIRE', list, wake_ttl) end
end

-- How long a queue entry at `position` (1 = the head) lives from now: the head lease near the
-- head, else the entry ttl the waiter asked for.
local function entry_life(position, entry_ttl)
  if position <= HEAD_PLACES then return math.min(HEAD_TTL_MS, entry_ttl) end
  return entry_ttl
end

-- Whether a queue entry's waiter claims a grant with a call of its own (a waiting `acquire`).
local function claims_grant(entry)
  return type(entry.claim) == 'number' and entry.claim > 0
end

-- Gives the entries in the first HEAD_PLACES places the head lease: an entry that moved up
-- with a longer life is shortened to now + HEAD_TTL_MS, so a dead one lapses; its waiter is
-- told at once ('h:<server ms>': call by then, HEAR_MS from now) unless it is due
-- to call (`due`, the hint it was given) well within that anyway (the usual case: one place up
-- from just behind them, where waiters look every second), so a live one keeps calling every
-- third of the lease. It blocks again until then: in a queue that drains faster it is handed
-- the lock first, and makes no script call for the move. (Told only as the queue moves it up;
-- deferring this until the queue had stayed put failed when nobody live was left to call.)
-- Entries already short (or lapsed) are left alone: one ZRANGE and one HMGET a call. After the
-- first write: an entry that does not decode is left for the next call to refuse.
-- `lock.lease_through` (set by a steady waiter's call that dropped lapsed entries at the head,
-- see acquire.lua) extends this to the places ahead of that waiter, at most AHEAD_PLACES: dead
-- waiters there then lapse together instead of a head's worth at a time.
local function lease_head(lock, wake_ttl)
  if lock.length <= 0 then return end
  local places = math.max(HEAD_PLACES, lock.lease_through or 0)
  local ids = redis.call('ZRANGE', lock.key.queue, 0, places - 1)
  if not ids[1] then return end
  local values = redis.call('HMGET', lock.key.waiters, unpack(ids))
  local short = lock.now + HEAD_TTL_MS
  for i, id in ipairs(ids) do
    local entry = decode(values[i])
    if entry and entry.exp > short then
      entry.exp = short
      local told = type(entry.due) ~= 'number' or entry.due > lock.now + HEAD_TTL_MS / 2
      if told then entry.due = lock.now + HEAR_MS end
      redis.call('HSET', lock.key.waiters, id, cjson.encode(entry))
      lock.queue_written = true
      if told then wake(lock, id, 'h:' .. int(entry.due), wake_ttl) end
    end
  end
end

