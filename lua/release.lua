-- release: give the lock up, by token ('token'), whoever holds it ('force'), or give up a token
-- ('leave': a waiter that stops waiting, or a caller that stopped waiting for an acquisition's
-- reply). 'leave' leaves the queue, gives back whatever the token holds (a lock handed over
-- meanwhile, or taken by the request given up on), and marks the token cancelled for
-- `mark_ttl_ms`, so that a request of that token still on its way takes nothing when it runs.
-- A token holding the lock more than once (re-entered by nested invocations) only counts down.
-- With a minimum hold (run --min-hold), a token release of a lock held for less than min_hold
-- keeps it until since + min_hold instead, so a late duplicate still finds it taken.
-- Then, while the queue's head is admitted, the lock is handed to it (see the prelude).
-- History: a hold that ends is marked released (with the `exit` status or `signal` the holder
-- reports, and `why`: a limit that stopped the command, who forced it; if any), forced, or
-- given back. A token that holds nothing but names the `fence` it
-- held (a `run` whose lease was lost) marks that entry lost, unless it already ended; either
-- way the exit status is recorded there.
-- Returns for 'token' (codes: REPLY.release, below): released, {kept, kept_ms} kept for
-- the minimum hold, {still_held, holds_left} still held by outer invocations, not_held the
-- token holds nothing (nothing changed); for 'force': {now_ms, holder_json...} of the evicted
-- holders; for 'leave': REPLY.leave.left.
-- Quorum mode (docs/servers.md, "Several masters") passes the channel its waiters listen on as `notify`:
-- a hold that ends here is published there. Under pcall: a user that may not publish makes its
-- waiters fall back to their backoff, never the release fail.

-- The status code that opens the reply, by name (REPLY.release.<name>, REPLY.leave.<name>): only the
-- number crosses to redlock, which names the same codes (src/lock/reply.rs: a test compares the two).
local REPLY = {
  release = {released = 1, not_held = 0, kept = 2, still_held = 3},
  leave = {left = 1},
}
local refused, key, arg = inputs(8, 12,
  {holders = KEYS[1], leases = KEYS[2], fence = KEYS[3], queue = KEYS[4], waiters = KEYS[5],
   wake = KEYS[6], cancel = KEYS[7], history = KEYS[8]},
  {op = ARGV[1], token = ARGV[2], min_hold_ms = ARGV[3], waiter = ARGV[4], grant_ms = ARGV[5],
   wake_ttl_ms = ARGV[6], mark_ttl_ms = ARGV[7], held_fence = ARGV[8], exit = ARGV[9],
   signal = ARGV[10], why = ARGV[11], notify = ARGV[12]})
if refused then return refused end
local op, token, min_hold, waiter = arg.op, arg.token, tonumber(arg.min_hold_ms), arg.waiter
local grant, wake_ttl = tonumber(arg.grant_ms), tonumber(arg.wake_ttl_ms)

local lock
refused, lock = open_lock(key, {wake = op == 'leave', fence = op == 'force', unqueued = op ~= 'leave'})
if refused then return refused end
local now = lock.now

local mine
refused, mine = holder_of(lock, token)
if refused then return refused end
if op == 'token' and mine == nil then
  if arg.held_fence ~= '' then
    refused = check_writes(lock, {history = true})
    if refused then return refused end
    -- From here on, writes (to the history only).
    history_change(lock, arg.held_fence, function(entry)
      if not entry.ended then entry.ended, entry.outcome = now, 'lost' end
      entry.exit = entry.exit or tonumber(arg.exit)
      entry.signal = entry.signal or tonumber(arg.signal)
      if arg.why ~= '' and not entry.why then entry.why = utf8_prefix(arg.why, 256) end
    end)
    settle(lock)
  end
  return REPLY.release.not_held
end
-- The head of the queue gets any room made: an entry there that is not redlock's refuses now.
refused = peek_head(lock)
if refused then return refused end

-- 'force' reports every live holder it evicts: all their records are read (and checked)
-- before the first write, in chunks (unpack takes a few thousand values at most).
local evicted = {now}
if op == 'force' and live_count(lock) > 0 then
  local tokens = redis.call('ZRANGEBYSCORE', key.leases, '(' .. int(now), '+inf')
  for i = 1, #tokens, 1000 do
    local values = redis.call('HMGET', key.holders, unpack(tokens, i, math.min(i + 999, #tokens)))
    for j = 1, #values do
      -- (A lease without a record: the record was deleted by hand; reconcile_holders saw it.)
      if values[j] and not decode_holder(values[j]) then return foreign(key.holders, 'holds a field') end
      if values[j] then evicted[#evicted + 1] = values[j] end
    end
  end
end

-- What this call writes: a hold counted down or kept for the minimum hold is rewritten, one
-- that ends is removed (both keys at once when it was the only one), the queue's head is
-- handed what is free.
local rewrites = op == 'token' and mine ~= nil and
  ((mine.count or 1) > 1 or math.min(mine.since, now) + min_hold > now)
local removes = op ~= 'force' and mine ~= nil and not rewrites
refused = check_writes(lock, {history = true, cancel = op == 'leave', drop = op == 'force' or
  (removes and lock.sole ~= nil), remove = (removes and lock.sole == nil) or lock.fix ~= nil or
  lock.indexed ~= live_count(lock), put = rewrites or lock.length > 0, fence = lock.length > 0,
  queue = lock.length > 0 or op == 'leave' or lock.orphans ~= nil})
if refused then return refused end

-- From here on, writes.
begin_writes(lock)
local reply = REPLY.release.released
if op == 'force' then
  redis.call('DEL', key.holders, key.leases)
  lock.live, lock.exclusive, lock.first, lock.holders_changed, lock.latest = 0, false, nil, false, 0
  for i = 2, #evicted do
    history_change(lock, decode(evicted[i]).fence, ended(now, 'forced', '', '', arg.why))
  end
  reply = evicted
elseif op == 'leave' then
  reply = REPLY.leave.left
  -- (No mark when no request of the token can still arrive: nothing is left behind.)
  if tonumber(arg.mark_ttl_ms) > 0 then redis.call('SET', key.cancel, '1', 'PX', arg.mark_ttl_ms) end
  remove_entry(lock, waiter)
  redis.call('DEL', key.wake)
end
if mine and op ~= 'force' then
  -- (A hold cannot have begun later than now: a `since` ahead of the clock, which stepped
  -- back or was written by hand, keeps the lock no longer than min_hold from now.)
  local keep_until = math.min(mine.since, now) + min_hold
  if op == 'token' and (mine.count or 1) > 1 then
    mine.count = mine.count - 1
    put_holder(lock, token, mine, false)
    reply = {REPLY.release.still_held, mine.count}
  elseif op == 'token' and keep_until > now then
    -- The hold is over; the lock stays taken until the minimum hold has passed.
    mine.exp, mine.ttl, mine.over = keep_until, keep_until - now, true
    put_holder(lock, token, mine, false)
    history_change(lock, mine.fence, ended(now, 'released', arg.exit, arg.signal, arg.why))
    reply = {REPLY.release.kept, keep_until - now}
  else
    remove_holder(lock, token, mine)
    local how = op == 'token' and 'released' or 'given back'
    history_change(lock, mine.fence, ended(now, how, arg.exit, arg.signal, arg.why))
  end
end

hand_off(lock, nil, grant, wake_ttl)
lease_head(lock, wake_ttl)
settle(lock)
if arg.notify ~= '' and (mine or #evicted > 1) then pcall(redis.call, 'PUBLISH', arg.notify, 'r') end
return reply
