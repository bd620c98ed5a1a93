-- extend: reset the expiry of a live holder (and of its history entry); never re-creates an
-- expired or foreign lock, nor prolongs a hold that is over (kept for a minimum hold: a
-- renewal still on its way when the run released must not hold it a whole lease longer).
-- `keeper`: the pid of the process renewing it for `acquire --keep-alive` ('' = none), kept in
-- the record beside the caller's.
-- Returns (codes: REPLY.extend, below) {extended, now_ms} when extended, {not_held,
-- now_ms} when the token holds nothing.

-- The status code that opens the reply, by name (REPLY.extend.<name>): only the number crosses
-- to redlock, which names the same codes (src/lock/reply.rs: a test compares the two).
local REPLY = {
  extend = {extended = 1, not_held = 0},
}
local refused, key, arg = inputs(3, 3,
  {holders = KEYS[1], leases = KEYS[2], history = KEYS[3]},
  {token = ARGV[1], ttl_ms = ARGV[2], keeper = ARGV[3]})
if refused then return refused end
local token, ttl = arg.token, tonumber(arg.ttl_ms)

local lock
refused, lock = open_lock(key, {})
if refused then return refused end
local mine
refused, mine = holder_of(lock, token)
if refused then return refused end
if mine == nil or mine.over then return {REPLY.extend.not_held, lock.now} end

refused = check_writes(lock, {put = true, history = true})
if refused then return refused end

-- From here on, writes.
begin_writes(lock)
mine.exp, mine.ttl, mine.granted, mine.wid = lock.now + ttl, ttl, nil, nil
if arg.keeper ~= '' then mine.keeper = tonumber(arg.keeper) end
put_holder(lock, token, mine, false)
history_change(lock, mine.fence, lease_reset(mine.exp))
settle(lock)
return {REPLY.extend.extended, lock.now}
