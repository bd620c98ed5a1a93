-- Hand-off: room handed to the head of the queue (and as many behind it as are admitted too), and
-- grants whose waiter never heard of them taken back.
-- (lua/prelude/ is joined in file-name order, then a script's own file: see lua/README.md.)

-- Waiters handed the lock by one call (a run of readers, a semaphore's free permits); when more
-- are admitted, the next one is told to look, and its own call goes on.
local MAX_GRANTS = 100

-- When it can be known whether the waiter of holder `record` heard of its grant (see HEAR_MS):
-- nil unless the record is a grant to a waiter that starts on it (`wid`, a waiter id as
-- redlock makes them: a record edited by hand names no other key).
local function hear_by(record)
  if not record.granted or type(record.wid) ~= 'string' or not token_shaped(record.wid, 16) then
    return nil
  end
  return record.since + HEAR_MS
end

-- The holder whose lease ends first, when it is a grant its waiter has not heard of (see
-- HEAR_MS): its wake list still there HEAR_MS after the grant. `caller`: the token of the
-- script's caller, whose own grant this never is (its call claims it). A read (TYPE): call it
-- before the first write, and reclaim_grant after.
local function unheard_grant(lock, caller)
  local refused, first = first_holder(lock)
  if refused or not first or first[1] == caller then return nil end
  local record = first[2]
  local known_at = hear_by(record)
  if not known_at or lock.now < known_at then return nil end
  local ok, found = pcall(redis.call, 'TYPE', wake_key(lock.key, record.wid))
  if ok and found['ok'] == 'list' then return first end
  return nil
end

-- Deletes an unheard grant's wake-up (the whole list: the waiter has no place left to be told
-- of) and then the grant, its history entry ending now (an expiry); nothing when the list
-- cannot be deleted (then the waiter could still take it, and the grant lapses by itself).
local function reclaim_grant(lock, unheard)
  local token, record = unheard[1], unheard[2]
  if not pcall(redis.call, 'DEL', wake_key(lock.key, record.wid)) then return end
  remove_holder(lock, token, record)
  history_change(lock, record.fence, lease_reset(lock.now))
end

-- Hands room to the queue's head, and to as many behind it as are admitted too (a run of
-- readers, the next permits of a semaphore), each with a short grant and a fence of its own;
-- stops at `stop_at` (the caller's waiter id), and after MAX_GRANTS (then tells the next one
-- to look: its call goes on). Tells each one 'g:<fence>:<grant expiry>', and the first left
-- waiting 'w:<earliest holder expiry>:<queue length>:<that holder's record>' so it watches
-- those grants without a script call of its own. Dead entries met at the head are dropped.
-- Returns how many were handed the lock.
local function hand_off(lock, stop_at, grant, wake_ttl)
  local granted, head, first = 0, nil, nil
  while true do
    local refused
    refused, head = peek_head(lock)
    drop_dead(lock)
    -- An entry that does not decode, met after the first write: leave it for the next call,
    -- which refuses before writing.
    if refused then head = nil end
    if head == nil or head[1] == stop_at or not admitted(head[2], lock) then break end
    if granted == MAX_GRANTS then
      wake(lock, head[1], 'l', wake_ttl)
      return granted
    end
    local id, entry = head[1], head[2]
    -- Never longer than the lease the waiter asked for (entries written before `ttl` was kept
    -- get the grant).
    local length = grant
    if type(entry.ttl) == 'number' and entry.ttl > 0 and entry.ttl < grant then length = entry.ttl end
    -- A waiter that claims its grant with a call of its own (acquire) does so at once: a grant
    -- it has not claimed within `claim` is a dead waiter's, and lapses for the next in line.
    if claims_grant(entry) and entry.claim < length then length = entry.claim end
    local record = holder_record(entry, next_fence(lock), lock.now, length)
    -- Until its waiter claims or renews it: who holds the lock is then "being handed over".
    record.granted = true
    -- A waiter that starts on the grant (no `claim`) is heard from by its wake list: see HEAR_MS.
    if not claims_grant(entry) then record.wid = id end
    -- A token that still holds a live record (kept for a minimum hold after its release, and
    -- queued again with the same token) is not one holder more: the grant replaces it.
    local kept = decode_holder(redis.call('HGET', lock.key.holders, entry.tok))
    local json = put_holder(lock, entry.tok, record, true)
    if kept and kept.exp > lock.now and lock.live then lock.live = lock.live - 1 end
    -- Grants are as long as each waiter asked, at most: the shortest ends first.
    if first == nil or record.exp < first[2].exp then first = {entry.tok, record, json} end
    remove_entry(lock, id)
    wake(lock, id, 'g:' .. record.fence .. ':' .. int(record.exp), wake_ttl)
    granted = granted + 1
  end
  if granted > 0 and head and head[1] ~= stop_at then
    -- The first lease to end: the shortest grant's, when every live holder is a new grant;
    -- else the index says.
    if live_count(lock) ~= granted then
      local _, earliest = first_holder(lock)
      first = earliest
    end
    -- A waiter due to call before that lease ends (`due`: told 'h:' as it moved up, or a
    -- head waiter's hint) learns of it from that call: telling it now would cost it a block
    -- more, and in a queue that drains faster it is handed the lock first.
    local due = head[2].due
    if first and not (type(due) == 'number' and due < first[2].exp) then
      wake(lock, head[1], 'w:' .. int(first[2].exp) .. ':' .. int(lock.length) .. ':' .. first[3], wake_ttl)
    end
  end
  return granted
end

