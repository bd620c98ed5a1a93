-- raise: quorum mode only (docs/servers.md, "Several masters"). A holder's fence is the largest that the
-- majority of masters which granted the lock issued; before the holder uses it, that fence is
-- written back to a majority: the counter rises to it (never falls), and the holder's record and
-- its history entry carry it, so any later majority sees a counter at least this high.
-- Token-checked: only a master where the token holds the lock is raised (the fencing argument
-- needs exactly those: docs/safety.md, "Fences over a quorum").
-- Returns (codes: REPLY.raise, below) {raised, now_ms} when raised, {not_held, now_ms}
-- when the token holds nothing here; an error reply for a fence that is not decimal digits
-- below the maximum (nothing changed).

-- The status code that opens the reply, by name (REPLY.raise.<name>): only the number crosses
-- to redlock, which names the same codes (src/lock/reply.rs: a test compares the two).
local REPLY = {
  raise = {raised = 1, not_held = 0},
}
local refused, key, arg = inputs(4, 2,
  {holders = KEYS[1], leases = KEYS[2], fence = KEYS[3], history = KEYS[4]},
  {token = ARGV[1], issued = ARGV[2]})
if refused then return refused end
local token, fence = arg.token, arg.issued
if not string.match(fence, '^%d+$') or tonumber(fence) >= MAX_FENCE then
  return redis.error_reply('ERR redlock raise: not a fence below the maximum')
end

local lock
refused, lock = open_lock(key, {fence = true})
if refused then return refused end
local mine
refused, mine = holder_of(lock, token)
if refused then return refused end
if mine == nil then return {REPLY.raise.not_held, lock.now} end

refused = check_writes(lock, {put = true, fence = true, history = true})
if refused then return refused end

-- From here on, writes.
begin_writes(lock)
if not lock.last_fence or tonumber(lock.last_fence) < tonumber(fence) then
  redis.call('SET', key.fence, fence)
end
local before = tostring(mine.fence)
if before ~= fence then
  mine.fence = fence
  put_holder(lock, token, mine, false)
  -- The history is scored by fence: the entry moves to the fence it now carries.
  local found = redis.call('ZRANGEBYSCORE', key.history, before, before, 'LIMIT', 0, 1)
  local entry = decode(found[1])
  if entry then
    entry.fence = fence
    history_replace(lock, found[1], fence, entry)
    lock.history_kept = entry
  end
end
settle(lock)
return {REPLY.raise.raised, lock.now}
