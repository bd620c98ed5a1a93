-- acquire: take the lock, claim a lock handed over to the caller, re-enter a lock the caller's
-- token already holds, or join / refresh the FIFO queue. Nobody barges: free room goes to the
-- queue's head first.
-- Returns (codes: REPLY.acquire, below) {acquired, fence, now_ms} when acquired (or
-- re-entered); {busy, now_ms, holder_json or false, position, length, hint_ms} when not
-- (position 0: not queued; hint: when to call again, at the latest); {gone, now_ms} when
-- `stay` is set and the caller is neither queued nor handed the lock; {not_held, now_ms} when
-- re-entering with a token that does not hold the lock; {cancelled, now_ms} when the token's
-- sender gave up on it (see below).
-- Every check happens before the first write, so an error reply leaves Redis untouched.

-- The status code that opens the reply, by name (REPLY.acquire.<name>): only the number crosses
-- to redlock, which names the same codes (src/lock/reply.rs: a test compares the two).
local REPLY = {
  acquire = {acquired = 1, busy = 0, gone = -1, not_held = -2, cancelled = -3},
}
local refused, key, arg = inputs(8, 18,
  {holders = KEYS[1], leases = KEYS[2], fence = KEYS[3], queue = KEYS[4], waiters = KEYS[5],
   wake = KEYS[6], cancel = KEYS[7], history = KEYS[8]},
  {token = ARGV[1], ttl_ms = ARGV[2], mode = ARGV[3], limit = ARGV[4], host = ARGV[5],
   pid = ARGV[6], user = ARGV[7], command = ARGV[8], note = ARGV[9], waiter = ARGV[10],
   stay = ARGV[11], entry_ttl_ms = ARGV[12], grant_ms = ARGV[13], wake_ttl_ms = ARGV[14],
   reenter = ARGV[15], claim_ms = ARGV[16], history_keep = ARGV[17], history_keep_ms = ARGV[18]})
if refused then return refused end
-- A request its sender gave up on (it timed out, or a signal ended the wait) takes nothing,
-- whenever it runs: the sender marked its token before leaving (release.lua, 'leave').
local marked
refused, marked = read(key.cancel, 'GET', key.cancel)
if refused then return refused end
if marked then return {REPLY.acquire.cancelled, server_now()} end
local token, ttl, waiter = arg.token, tonumber(arg.ttl_ms), arg.waiter
local stay, reenter = arg.stay == '1', arg.reenter == '1'
local entry_ttl, grant, wake_ttl = tonumber(arg.entry_ttl_ms), tonumber(arg.grant_ms), tonumber(arg.wake_ttl_ms)
local request = {
  mode = arg.mode, limit = tonumber(arg.limit), host = arg.host, pid = tonumber(arg.pid),
  user = arg.user, cmd = arg.command, note = arg.note ~= '' and arg.note or nil,
  -- The history's retention this hold asks for ('' = the lock's own; see the prelude).
  keep = tonumber(arg.history_keep), keep_ms = tonumber(arg.history_keep_ms),
}

local lock
refused, lock = open_lock(key, {fence = true, free = not stay, wake = waiter ~= ''})
if refused then return refused end
local now = lock.now

-- What the caller has: a live hold of its token, a queue entry (live or dead).
local mine, entry, first, head
refused, mine = holder_of(lock, token)
if refused then return refused end
-- A hold that is over (kept for the minimum hold) is nobody's to re-enter or renew: a request
-- of its token that comes now (a late duplicate, a leftover process) is a stranger's.
if mine and mine.over then mine = nil end
if waiter ~= '' then
  local json = redis.call('HGET', key.waiters, waiter)
  entry = decode_entry(json)
  if json and not entry then return foreign(key.waiters, 'holds a field') end
end
-- Our own entry keeps its place while the queue holds it, even lapsed (this process, or the
-- server, was stalled past the head lease): only a steady waiter (see the prelude) or a grace
-- of REAP_GRACE_MS drops a lapsed entry, and this call renews it. A caller whose own entry was
-- live all along, for a head lease at least, drops the lapsed entries it finds at the head.
local queued = entry ~= nil and redis.call('ZRANK', key.queue, waiter) ~= false and
  entry.exp + REAP_GRACE_MS > now
lock.reaps = queued and entry.exp > now and now - (entry.steady or entry.since) >= HEAD_TTL_MS

-- A lock is either a read/write lock (exclusive and shared holders) or a semaphore of N; every
-- live holder and waiter is of one kind, so the first of each speaks for all.
refused, first = first_holder(lock)
if refused then return refused end
refused, head = peek_head(lock)
if refused then return refused end
-- Dead waiters at the head, dropped by this (steady) caller: more may be dead between the head
-- and the caller (see lease_head and hint_at).
local reaping = lock.reaps and lock.dead[1] ~= nil
-- A grant handed to a waiter that was not listening goes, and the lock passes on (see HEAR_MS
-- in the prelude).
local unheard = unheard_grant(lock, token)
local function kind(record)
  if record.mode == 'semaphore' then return 'a semaphore of ' .. record.limit end
  return 'an exclusive/shared lock'
end
local wanted = kind(request)
-- (`or false`: a nil would end ipairs early, and skip the head and our own record when nobody
-- holds the lock.)
for _, other in ipairs({first and first[2] or false, head and head[2] or false, mine or false}) do
  if other and kind(other) ~= wanted then
    return redis.error_reply('MODE the lock is ' .. kind(other) .. ', not ' .. wanted .. '; nothing was changed')
  end
end

if reenter and mine == nil then return {REPLY.acquire.not_held, now} end
if reenter and request.mode == 'exclusive' and mine.mode == 'shared' then
  return redis.error_reply('MODE the lock is held shared by this token; it cannot be re-entered exclusively')
end
if stay and mine == nil and not queued then return {REPLY.acquire.gone, now} end

-- A caller that does not wait, on a held lock that nobody queues for, takes nothing: it
-- writes at most the purge of expired holders (and a repair of the index), and asks only about
-- that (the cron fleet's hosts that skip a run). Every other call asks about every write its
-- hold or its place may need (see check_writes).
local passes_by = waiter == '' and mine == nil and lock.length == 0 and not unheard and
  not admitted(request, lock)
if passes_by then
  refused = check_writes(lock, {put = lock.fix ~= nil, queue = lock.orphans ~= nil,
    remove = lock.fix ~= nil or lock.indexed ~= live_count(lock)})
else
  refused = check_writes(lock, {all = true})
end
if refused then return refused end

-- From here on, writes.
begin_writes(lock)
if unheard then reclaim_grant(lock, unheard) end
if entry and not queued then
  -- Our own entry was dropped, or lapsed long ago (this process was suspended): it goes, and
  -- we join anew.
  remove_entry(lock, waiter)
  entry = nil
elseif entry and entry.exp <= now then
  -- A lapsed entry renewed: its run of timely calls starts again.
  entry.steady = now
end

-- Taken: the caller's record is written, its entry and wake-ups go, and whoever is admitted
-- behind it is handed the lock too.
local function acquired(record, new)
  put_holder(lock, token, record, new)
  if not new then
    history_change(lock, record.fence, lease_reset(record.exp))
  end
  if entry then remove_entry(lock, waiter) end
  -- Wake-ups left for a waiter that is done waiting (a fail-fast caller has no wake list).
  if waiter ~= '' then redis.call('DEL', key.wake) end
  hand_off(lock, nil, grant, wake_ttl)
  lease_head(lock, wake_ttl)
  settle(lock)
  return {REPLY.acquire.acquired, record.fence, now}
end

if mine then
  if reenter then
    -- A nested invocation: one more hold on the same lease.
    mine.count = (mine.count or 1) + 1
    if now + ttl > mine.exp then mine.exp, mine.ttl = now + ttl, ttl end
  else
    -- Handed over while we waited: turn the short grant into a full lease.
    mine.exp, mine.ttl = now + ttl, ttl
  end
  mine.granted, mine.wid = nil, nil
  return acquired(mine, false)
end

hand_off(lock, entry and waiter, grant, wake_ttl)
refused, head = peek_head(lock)
local first_in_line = head == nil and not lock.head_unknown or (head ~= nil and head[1] == waiter)
if first_in_line and not refused and admitted(request, lock) then
  return acquired(holder_record(request, next_fence(lock), now, ttl), true)
end

-- The first two in line watch the earliest expiry among the holders (and call every HEAR_MS,
-- see below); the first HEAD_PLACES call every third of their head lease (which drops the
-- dead ones ahead of them as they lapse); behind them, a waiter looks once per place between
-- it and them, every third of a head lease (so the calls of a long idle queue grow only with
-- the log of its length), at least every third of the entry ttl (and of the lease it asked
-- for, in the first AHEAD_PLACES), and once the head lease of the places ahead of it lapsed
-- when this call gave it to them (lease_through). With more dead entries at the head than one
-- call examines, everyone calls again soon. The entry keeps when its waiter is due to call
-- (`due`): one moving into the first places on time needs no wake-up (lease_head).
local function hint_at(position)
  local _, earliest = first_holder(lock)
  local hint = math.floor(entry_ttl / 3)
  if position > 0 then
    local look = math.floor(math.min(HEAD_TTL_MS, entry_ttl) / 3)
    hint = math.min(hint, look * math.max(1, position - HEAD_PLACES))
  end
  -- Within the places a steady waiter's call can give the head lease to (AHEAD_PLACES), a
  -- waiter looks at least as often as a holder renews (a third of the lease it asked for; once
  -- a second at most): dead waiters ahead of it are found within that. Further back, the calls
  -- of a long idle queue stay cheap.
  if position > 0 and position <= AHEAD_PLACES then
    local renewal = math.max(math.floor(ttl / 3), math.floor(math.min(HEAD_TTL_MS, entry_ttl) / 3))
    hint = math.min(hint, renewal)
  end
  -- The places ahead were given the head lease: look again once it lapsed.
  if lock.lease_through then hint = math.min(hint, HEAD_TTL_MS + 100) end
  if lock.head_unknown then hint = 0 end
  -- The first two in line look every HEAR_MS at least, and when the first lease to end is a
  -- grant its waiter may not have heard of, as soon as that can be known: a dead `run` waiter
  -- handed the lock costs the queue HEAR_MS, not its grant.
  if position > 0 and position <= 2 then
    hint = math.min(hint, HEAR_MS)
    if earliest then
      local look_at = earliest[2].exp
      local known_at = hear_by(earliest[2])
      if known_at and known_at > now then look_at = math.min(look_at, known_at) end
      hint = math.min(hint, look_at - now)
    end
  end
  return hint
end

local position = 0
if entry then
  position = redis.call('ZRANK', key.queue, waiter) + 1
  if reaping and position > HEAD_PLACES + 1 then
    lock.lease_through = math.min(position - 1, AHEAD_PLACES)
  end
  entry.exp, entry.due = now + entry_life(position, entry_ttl), now + hint_at(position)
  put_entry(lock, waiter, entry, now + entry_ttl)
elseif waiter ~= '' and not lock.head_unknown then
  -- A new place at the back. Wake-ups left from an earlier one (a lapsed grant) mean nothing now.
  redis.call('DEL', key.wake)
  local last = redis.call('ZRANGE', key.queue, -1, -1, 'WITHSCORES')
  entry = {
    tok = token, mode = request.mode, limit = request.limit, host = request.host,
    pid = request.pid, user = request.user, cmd = request.cmd, note = request.note, since = now,
    exp = now + entry_life(lock.length + 1, entry_ttl), ttl = ttl, steady = now,
    claim = tonumber(arg.claim_ms) > 0 and tonumber(arg.claim_ms) or nil,
    due = now + hint_at(lock.length + 1), keep = request.keep, keep_ms = request.keep_ms,
  }
  redis.call('ZADD', key.queue, (tonumber(last[2]) or 0) + 1, waiter)
  put_entry(lock, waiter, entry, now + entry_ttl)
  lock.length = lock.length + 1
  position = lock.length
end
lease_head(lock, wake_ttl)
settle(lock)

refused, first = first_holder(lock)
return {REPLY.acquire.busy, now, first and first[3] or false, position, lock.length,
  entry and entry.due - now or hint_at(position)}
