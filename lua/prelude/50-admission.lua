-- Admission: fences, the holders hash and its leases index, and who is admitted to hold the lock
-- now.
-- (lua/prelude/ is joined in file-name order, then a script's own file: see lua/README.md.)

-- The largest fence (MAX_WHOLE).
local MAX_FENCE = MAX_WHOLE

-- The unit of the clock that a fence takes when the counter is there (µs): a tenth of a second.
-- Masters of a quorum (README.md, "Several masters") whose counters are equal then issue the
-- same fence unless a tenth of a second begins between their scripts, and need no round to
-- write it back; with the clock to the microsecond they would never agree.
local FENCE_CLOCK_UNIT = 100000

-- The next fencing token: the server's clock in microseconds (rounded down to FENCE_CLOCK_UNIT
-- when there is a counter), or one more than the last fence issued (the counter) when that is
-- higher: a hybrid clock. The counter never expires and only grows. The clock makes fences rise
-- across a counter that is missing (a new lock name, or the counter was lost: evicted, flushed,
-- a restart without persistence) or behind (a failover to a replica that had not received the
-- latest fences): every fence issued before was at most the clock of the server that issued it,
-- plus the fences it issued within one microsecond. The assumptions (README.md, "Safety"): no
-- server's clock is behind another's by as much as the time between the last fence the one
-- issues and the first the other does (a failover takes seconds), less a tenth of a second; and
-- no clock steps back by that much. Scripts replicate by their effects (see the top of this
-- file): replicas and the AOF get the value, not a second reading of the clock.
local function next_fence(lock)
  local clock = lock.now_us
  if lock.last_fence then clock = clock - clock % FENCE_CLOCK_UNIT end
  local fence
  if lock.last_fence and tonumber(lock.last_fence) >= clock then
    fence = redis.call('INCR', lock.key.fence)
  else
    fence = clock
    redis.call('SET', lock.key.fence, int(clock))
  end
  lock.last_fence = int(fence)
  return fence
end

-- Expired holders deleted per call, oldest first (the rest wait for later calls; they are never
-- counted as holders meanwhile).
local PURGE_CHUNK = 100

-- The holders hash is the truth, the leases set its index. Their counts differ only when
-- someone changed one by hand (deleted the hash to free the lock, a field to evict a holder):
-- then, and only then, both are read whole (O(n)) to rebuild the index from the records
-- (kept in lock.fix, applied by begin_writes) and to answer this call from the records.
-- Returns an error reply when a field or member is not redlock's.
local function reconcile_holders(lock)
  local key, records, live, first = lock.key, {}, 0, nil
  local fields = redis.call('HGETALL', key.holders)
  for i = 1, #fields, 2 do
    local record = decode_holder(fields[i + 1])
    if not record then return foreign(key.holders, 'holds a field') end
    records[fields[i]] = record
    if record.exp > lock.now then
      live = live + 1
      if first == nil or record.exp < first[2].exp then first = {fields[i], record, fields[i + 1]} end
    end
  end
  local fix, members = {add = {}, drop = {}}, redis.call('ZRANGE', key.leases, 0, -1)
  local indexed = {}
  for _, token in ipairs(members) do
    if records[token] then
      indexed[token] = true
    elseif token_shaped(token, 32) then
      fix.drop[#fix.drop + 1] = token
    else
      return foreign(key.leases, 'holds a member')
    end
  end
  for token, record in pairs(records) do
    if not indexed[token] then
      fix.add[#fix.add + 1] = record.exp
      fix.add[#fix.add + 1] = token
    end
  end
  lock.fix, lock.live, lock.first = fix, live, first or false
  return nil
end

-- How many holders are live (read once, then kept up to date by put_holder and remove_holder).
local function live_count(lock)
  if lock.live == nil then
    lock.live = redis.call('ZCOUNT', lock.key.leases, '(' .. int(lock.now), '+inf')
  end
  return lock.live
end

-- The live holder whose lease ends first: nil and {token, record, json}, nil when nobody holds
-- the lock; or an error reply for a record redlock did not write. Cached until holders change.
local function first_holder(lock)
  if lock.first ~= nil then return nil, lock.first or nil end
  lock.first = false
  if live_count(lock) == 0 then return nil, nil end
  local found = redis.call('ZRANGEBYSCORE', lock.key.leases, '(' .. int(lock.now), '+inf', 'LIMIT', 0, 1)
  if not found[1] then return nil, nil end
  local json = redis.call('HGET', lock.key.holders, found[1])
  local record = decode_holder(json)
  if not record then return foreign(lock.key.holders, 'holds a field'), nil end
  lock.first = {found[1], record, json}
  return nil, lock.first
end

-- The live record of `token`: nil and the record, or nil when the token holds nothing live; or
-- an error reply for a record redlock did not write.
local function holder_of(lock, token)
  if token == '' or lock.holders == 0 then return nil, nil end
  local json = redis.call('HGET', lock.key.holders, token)
  if not json then return nil, nil end
  local record = decode_holder(json)
  if not record then return foreign(lock.key.holders, 'holds a field'), nil end
  if record.exp <= lock.now then return nil, nil end
  -- The only holder, and live: no count of the live ones to read (live_count).
  if lock.holders == 1 and lock.indexed == 1 then lock.live, lock.sole = 1, token end
  return nil, record
end

-- Writes a holder record and its lease (the record's expiry is its score). `new`: a holder
-- that was not live before, now counted, whose hold starts an entry in the history.
local function put_holder(lock, token, record, new)
  local json = cjson.encode(record)
  redis.call('HSET', lock.key.holders, token, json)
  redis.call('ZADD', lock.key.leases, record.exp, token)
  if new then history_start(lock, record, json) end
  if new and lock.live then lock.live = lock.live + 1 end
  if record.mode == 'exclusive' then lock.exclusive = true end
  if lock.sole == token then
    -- Still the only holder (renewed, re-entered, kept): its lease is the latest.
    lock.latest = record.exp
  else
    if lock.latest then lock.latest = math.max(lock.latest, record.exp) end
    lock.sole = nil
  end
  lock.first, lock.holders_changed = nil, true
  return json
end

-- Deletes a live holder and its lease (both keys, when it was the only one).
local function remove_holder(lock, token, record)
  if lock.sole == token then
    redis.call('DEL', lock.key.holders, lock.key.leases)
    lock.latest, lock.sole = 0, nil
  else
    redis.call('HDEL', lock.key.holders, token)
    redis.call('ZREM', lock.key.leases, token)
    lock.latest = nil
  end
  if lock.live then lock.live = lock.live - 1 end
  if record.mode == 'exclusive' then lock.exclusive = false end
  lock.first, lock.holders_changed = nil, true
end

-- Deletes up to PURGE_CHUNK expired holders, oldest lease first (nothing to do, and no call,
-- when every lease counted at the start is live).
local function purge_holders(lock)
  if lock.indexed == live_count(lock) then return end
  local stale = redis.call('ZRANGEBYSCORE', lock.key.leases, '-inf', int(lock.now), 'LIMIT', 0, PURGE_CHUNK)
  if stale[1] then
    redis.call('HDEL', lock.key.holders, unpack(stale))
    redis.call('ZREM', lock.key.leases, unpack(stale))
    lock.holders_changed = true
  end
end

-- Whether the live holders are exclusive (then there is exactly one).
local function held_exclusive(lock)
  if lock.exclusive == nil then
    local _, first = first_holder(lock)
    lock.exclusive = first ~= nil and first[2].mode == 'exclusive'
  end
  return lock.exclusive
end

-- Whether a request (mode, limit) at the head of the queue, or with nobody queued, is admitted
-- now: exclusive needs no live holder; shared needs no exclusive holder; a semaphore needs
-- fewer live holders than its limit. Behind anyone, nobody is admitted: a head that is not
-- admitted holds back everyone behind it (so a queued writer holds back later readers).
local function admitted(request, lock)
  local live = live_count(lock)
  if request.mode == 'exclusive' then return live == 0 end
  if request.mode == 'semaphore' then return live < request.limit end
  return live == 0 or not held_exclusive(lock)
end

