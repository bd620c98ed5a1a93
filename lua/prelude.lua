-- prelude: helpers shared by every script, prepended to each one when it is compiled in (a fixed
-- text, so each script keeps a fixed SHA). Everything here is local to the script.
--
-- Cost rule: a script's work is O(log n) in the queue length and the number of holders, plus
-- what it actually touches (the holders it grants or evicts, at most SCAN_BUDGET queue entries
-- examined, at most PURGE_CHUNK expired holders deleted). Nothing here reads a whole hash or
-- sorted set; see README.md for the layout.
--
-- Failure rule: every step that can fail (a type check, an ACL check, a record that does not
-- decode) comes before the first write, so an error reply leaves Redis untouched. After the
-- first write, the only calls are ones that cannot fail on data we have checked; a push onto
-- another waiter's wake list (a key we cannot check in advance) is made under pcall.

-- Queue entries examined per call while looking for the first live one (dead ones at the head
-- are dropped as they are found).
local SCAN_BUDGET = 1000
-- Expired holders deleted per call, oldest first (the rest wait for later calls; they are never
-- counted as holders meanwhile).
local PURGE_CHUNK = 100
-- Waiters handed the lock by one call (a run of readers, a semaphore's free permits); when more
-- are admitted, the next one is told to look, and its own call goes on.
local MAX_GRANTS = 100
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
-- A lock's history keeps its last HISTORY_CAP holds (by fence), and lives HISTORY_TTL_MS past
-- its last change, unless its holders asked for another retention (`keep` holds, `keep_ms`;
-- run/acquire --history, --history-ttl): each entry carries the retention its hold asked for
-- or inherited from the newest entry before it, so every writer of the lock keeps to it.
-- Retentions are bounded: 1 to HISTORY_MAX_CAP holds, HISTORY_MIN_TTL_MS to HISTORY_MAX_TTL_MS.
local HISTORY_CAP = 100
local HISTORY_MAX_CAP = 1000
-- History entries trimmed per call at most (settle), well above what one call adds (its own
-- hold and MAX_GRANTS hand-offs).
local HISTORY_TRIM = 1000
local HISTORY_TTL_MS = 30 * 24 * 3600 * 1000
local HISTORY_MIN_TTL_MS = 60 * 1000
local HISTORY_MAX_TTL_MS = 366 * 24 * 3600 * 1000
-- The longest lease a redlock call asks for, 30 days (a --ttl or --min-hold: src/duration.rs,
-- MAX; a test compares them).
-- A lease read back from the index after a script's first write (settle) is kept within it: a
-- score someone wrote by hand may be anything, and a PEXPIREAT it made fail would leave the
-- script half done.
local LONGEST_LEASE_MS = 2592000000

-- The status code that opens each script's reply, by name: `REPLY.<script>.<name>` (a release
-- with op 'leave' answers from REPLY.leave). Only the number crosses to redlock, which names
-- the same codes (src/lock/reply.rs: a test compares the two; README.md has the table).
local REPLY = {
  acquire = {acquired = 1, busy = 0, gone = -1, not_held = -2, cancelled = -3},
  release = {released = 1, not_held = 0, kept = 2, still_held = 3},
  leave = {left = 1},
  extend = {extended = 1, not_held = 0},
  raise = {raised = 1, not_held = 0},
  refresh = {queued = 1, not_queued = 0},
  doctor = {checked = 1, unchecked = 0},
}

-- redlock needs Redis 6.0 or later (docs/servers.md, "Supported servers"). Older servers are refused
-- before anything is read or written, naming the version found: 6.0 gave scripts
-- redis.setresp, which older ones lack. (INFO under pcall: a rename may hide it; an older
-- server has no ACL to deny it.)
if redis.setresp == nil then
  local ok, info = pcall(redis.call, 'INFO', 'server')
  local version = ok and type(info) == 'string' and string.match(info, 'redis_version:([%w%.%-]+)')
  return redis.error_reply('OLDSERVER ' .. (version or 'older than 6.0'))
end
-- Writes replicate as their effects, not as the script: what a script computed from the
-- server's clock (a lease's end, a fence) reaches replicas and the AOF as the value computed.
-- Redis 7 knows no other way (and ignores this); on 6.x it is the default, set here in case a
-- configuration turned it off (scripts that read TIME and then write would fail there).
if redis.replicate_commands then redis.replicate_commands() end

-- Names the script's KEYS and ARGV, in order: `key.<name>` and `arg.<name>`. The same names, in
-- the same order, are declared on the Rust side (src/scripts.rs; a test compares them). Returns
-- nil, key, arg; or an error reply when the caller sent another number of either.
local function inputs(key_names, arg_names)
  if #KEYS ~= #key_names or #ARGV ~= #arg_names then
    return redis.error_reply('ERR redlock script called with ' .. #KEYS .. ' keys and ' .. #ARGV ..
      ' arguments; it takes ' .. #key_names .. ' and ' .. #arg_names .. ' (mixed redlock versions?)')
  end
  local key, arg = {}, {}
  for i, name in ipairs(key_names) do key[name] = KEYS[i] end
  for i, name in ipairs(arg_names) do arg[name] = ARGV[i] end
  return nil, key, arg
end

-- An integer as decimal digits. Lua's own conversion (`..`, tostring, cjson) keeps 14
-- significant digits: fences and times must never pass through it.
local function int(n)
  return string.format('%d', n)
end

-- An error reply for data at one of our key names that redlock did not write.
local function foreign(key, what)
  return redis.error_reply('WRONGTYPE ' .. key .. ' ' .. what .. ' that redlock did not write')
end

-- Runs a read that doubles as the type check of `key`. Returns nil and the reply; or an error
-- reply: foreign data when the key is of another type (TYPE is asked only then, for the
-- message: every call costs the server time), else the error itself (an ACL denial, say).
local function read(key, ...)
  local ok, reply = pcall(redis.call, ...)
  if ok then return nil, reply end
  local message = type(reply) == 'table' and reply.err or tostring(reply)
  if string.find(message, 'WRONGTYPE', 1, true) then
    return foreign(key, 'is a ' .. redis.call('TYPE', key)['ok'])
  end
  return redis.error_reply(message)
end

-- The server's clock: ms, and µs (for fences, next_fence). Read once per script: every
-- redis.call costs the server time.
local function server_clock()
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  return seconds * 1000 + math.floor(micros / 1000), seconds * 1000000 + micros
end

-- The server's clock, in ms.
local function server_now()
  return (server_clock())
end

-- The type of each field of the records redlock writes (holder records, queue entries,
-- history entries). The scripts do arithmetic on these, compare them, pass them to Redis and
-- encode them again, after their first write: a record whose fields would make one of those
-- calls fail must be refused before it. (Built at the first record decoded: a script that
-- decodes none, as an acquisition of a free lock, spends no server time on it.)
local FIELD_TYPES
local function field_type(name)
  FIELD_TYPES = FIELD_TYPES or {
    exp = 'number', since = 'number', ttl = 'number', count = 'number', limit = 'number',
    pid = 'number', ended = 'number', exit = 'number', signal = 'number', tok = 'string',
    mode = 'string', host = 'string', user = 'string', cmd = 'string', note = 'string',
    outcome = 'string', over = 'boolean', why = 'string', keeper = 'number', steady = 'number',
    due = 'number', granted = 'boolean', claim = 'number', keep = 'number', keep_ms = 'number',
    wid = 'string',
  }
  return FIELD_TYPES[name]
end

-- The largest whole number a script computes with: Lua's numbers hold every integer up to
-- 2^53 - 1, and no further.
local MAX_WHOLE = 9007199254740991
-- The largest number a record's field may hold: cjson writes numbers with 14 significant
-- digits, so a larger one would come back in exponent form, which no reader takes for a whole
-- number (times in ms stay below it until the year 5138).
local MAX_FIELD_NUMBER = 99999999999999

-- Whether `value` may stand in a record: a string, a boolean, or a finite number (cjson
-- cannot encode infinity or NaN, which it decodes), never a nested table. The numbers scripts
-- compute with (the fields of FIELD_TYPES) are whole and within MAX_FIELD_NUMBER, a fence
-- within MAX_WHOLE: sums of a few of them print as integers (int), are taken by every command
-- that takes a time, a score or a count, and are written back as they were read, so no call
-- after the first write can fail on them and no reader finds them changed.
local function flat_value(name, value)
  local kind = type(value)
  if kind == 'number' and (value ~= value or value == math.huge or value == -math.huge) then
    return false
  end
  local wanted = name == 'fence' and 'fence' or field_type(name)
  if kind == 'number' and wanted and (value ~= math.floor(value) or
      math.abs(value) > (wanted == 'fence' and MAX_WHOLE or MAX_FIELD_NUMBER)) then
    return false
  end
  if wanted == 'fence' then
    -- A string of digits (see int()); older records hold a number.
    return (kind == 'number' and value >= 0) or (kind == 'string' and string.match(value, '^%d+$') ~= nil)
  end
  if wanted then return kind == wanted end
  return kind == 'string' or kind == 'number' or kind == 'boolean'
end

-- Decodes a holder record, queue entry or history entry; nil when it is not one redlock
-- wrote: not a flat JSON object, a field of another type, or no mode, since or exp (or no
-- limit for a semaphore).
local function decode(json)
  if type(json) ~= 'string' then return nil end
  local ok, record = pcall(cjson.decode, json)
  if not ok or type(record) ~= 'table' then return nil end
  for name, value in pairs(record) do
    if type(name) ~= 'string' or not flat_value(name, value) then return nil end
  end
  if not (record.mode and record.since and record.exp) then return nil end
  if record.mode == 'semaphore' and not record.limit then return nil end
  -- (An older record's fence, a number, is written back as digits: see int().)
  if type(record.fence) == 'number' then record.fence = int(record.fence) end
  return record
end

-- Decodes a holder record: a record with the fence of its acquisition.
local function decode_holder(json)
  local record = decode(json)
  if record and record.fence then return record end
  return nil
end

-- Decodes a queue entry: a record with the token its waiter will hold.
local function decode_entry(json)
  local entry = decode(json)
  if entry and entry.tok then return entry end
  return nil
end

-- The wake list of waiter `id`, named from the queue key (same hash tag, so the same Cluster
-- slot): a script handing the lock over cannot know in advance whom to pass in KEYS.
local function wake_key(key, id)
  return string.sub(key.queue, 1, -7) .. ':wake:' .. id
end

-- Whether the user may run `command` on `key` (with its other arguments: Redis reads a
-- command's keys from them): nil, or the error reply that refuses the script. Scripts ask about
-- each write they will make before their first one (check_writes). Redis before 7.0 cannot
-- ask; there an ACL that denies a write still fails the script part-way (grant redlock's user
-- the commands of docs/servers.md, "ACL").
local function denied(command, key, ...)
  if not redis.acl_check_cmd or redis.acl_check_cmd(command, key, ...) then return nil end
  return redis.error_reply('NOPERM this user may not run ' .. command .. ' on ' .. key ..
    ', which redlock needs; nothing was changed')
end

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

-- The reads that a lock's later calls make (a release, a renewal, a waiter's look): an
-- acquisition asks about them with its writes (check_writes, `all`), or a user who may write
-- but not read could take a lock it cannot let go of. Each once, of the key it reads most (an
-- ACL that tells one lock's keys apart is asked about by the writes' questions); the script's
-- own reads need no question (a denied one fails the script before its first write).
local function later_reads_denied(key)
  return denied('HLEN', key.holders) or denied('HGET', key.holders, 'f')
    or denied('HMGET', key.holders, 'f') or denied('ZCARD', key.leases)
    or denied('ZCOUNT', key.leases, '1', '2') or denied('ZRANGE', key.leases, '0', '1')
    or denied('ZRANGEBYSCORE', key.leases, '1', '2') or denied('ZRANK', key.queue, 'm')
    or denied('GET', key.fence) or denied('TYPE', key.wake) or denied('PTTL', key.queue)
end

-- Checks, before the first write, the writes a script that changes a lock will make, by what
-- it will do (`does`): `put` holder records, `remove` some (or expired ones), `drop` both
-- holder keys at once, take a `fence`, write the `history`, the `queue` (entries, places, the
-- caller's wake list and other waiters'), a give-up's `cancel` mark; or `all` of them, and
-- the reads of the lock's later calls (later_reads_denied). Each
-- check costs the server time (about as much as a read): a release, a renewal, asks only
-- about what it will write; an acquisition asks about `all`, so that a user who could not
-- let go of a lock, or leave its queue, is refused before it takes or joins it. Returns nil,
-- or the error reply of the first write the user may not make.
local function check_writes(lock, does)
  if not redis.acl_check_cmd then return nil end
  local key, all = lock.key, does.all
  return ((all or does.put) and (denied('HSET', key.holders, 'f', 'v') or denied('ZADD', key.leases, '1', 'm')))
    or ((all or does.remove) and (denied('HDEL', key.holders, 'f') or denied('ZREM', key.leases, 'm')))
    -- (Holders that remain after a put or a removal get the latest lease's expiry: settle.)
    or ((all or does.put or does.remove) and (denied('PEXPIREAT', key.holders, '1')
      or denied('PEXPIREAT', key.leases, '1')))
    or ((all or does.drop) and denied('DEL', key.holders, key.leases))
    or ((all or does.fence) and (denied('INCR', key.fence) or denied('SET', key.fence, '1')))
    or ((all or does.history) and (denied('ZADD', key.history, '1', 'm') or denied('ZREM', key.history, 'm')
      or denied('PEXPIRE', key.history, '1')))
    or ((all or does.queue) and (denied('ZADD', key.queue, '1', 'm') or denied('ZREM', key.queue, 'm')
      or denied('PEXPIREAT', key.queue, '1') or denied('HSET', key.waiters, 'f', 'v')
      or denied('HDEL', key.waiters, 'f') or denied('PEXPIREAT', key.waiters, '1')
      or denied('DEL', key.wake) or denied('RPUSH', wake_key(key, '0'), 'v')
      or denied('PEXPIRE', wake_key(key, '0'), '1')))
    or ((all or does.cancel) and denied('SET', key.cancel, '1', 'PX', '1'))
    or (all and later_reads_denied(key))
    or nil
end

-- Whether `text` is shaped like a token (32 hex digits) or a waiter id (16).
local function token_shaped(text, length)
  return #text == length and string.match(text, '^%x+$') ~= nil
end

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

-- How many of `keys` exist (EXISTS), or nil when the user may not ask: the ACL of
-- docs/servers.md did not grant EXISTS before redlock used it, and a server older than 7.0
-- cannot be asked (there EXISTS is not used).
local function existing(...)
  if redis.acl_check_cmd and redis.acl_check_cmd('EXISTS', ...) then return redis.call('EXISTS', ...) end
  return nil
end

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

-- `value` (a record's field) as a whole number from `low` to `high`; `default` when absent.
local function bounded(value, default, low, high)
  if type(value) ~= 'number' then return default end
  return math.max(low, math.min(high, math.floor(value)))
end

-- How many holds a history keeps, and for how long past its last change (ms), as `entry` (the
-- newest, or the one just written) says.
local function retention(entry)
  if not entry then return HISTORY_CAP, HISTORY_TTL_MS end
  return bounded(entry.keep, HISTORY_CAP, 1, HISTORY_MAX_CAP),
    bounded(entry.keep_ms, HISTORY_TTL_MS, HISTORY_MIN_TTL_MS, HISTORY_MAX_TTL_MS)
end

-- The history: one entry per hold, scored by its fence, written when the hold starts
-- (history_start) and changed when its lease is reset or it ends (history_change). An entry
-- without an end whose lease has passed is a hold that expired. Scripts that do not pass the
-- history key leave it alone. Each entry carries its retention (see HISTORY_CAP): the
-- holder's own (`record.keep`, `record.keep_ms`), else the newest entry's; settle applies the
-- retention of the last entry written.
local function history_start(lock, record, record_json)
  local key = lock.key.history
  if not key then return end
  local keep, keep_ms = record.keep, record.keep_ms
  if (keep == nil or keep_ms == nil) and lock.history_count > 0 then
    -- (After the first write: an entry that does not decode keeps nothing.)
    -- (Decoded only when it can carry one: cjson writes no other spelling of these names.)
    local json = redis.call('ZRANGE', key, -1, -1)[1]
    local newest = json and string.find(json, '"keep', 1, true) and decode(json)
    if newest then keep, keep_ms = keep or newest.keep, keep_ms or newest.keep_ms end
  end
  -- Within bounds, as whole numbers: one written by hand is not passed on as it was.
  if keep ~= nil then keep = bounded(keep, HISTORY_CAP, 1, HISTORY_MAX_CAP) end
  if keep_ms ~= nil then
    keep_ms = bounded(keep_ms, HISTORY_TTL_MS, HISTORY_MIN_TTL_MS, HISTORY_MAX_TTL_MS)
  end
  local entry, json = record, record_json
  if keep ~= record.keep or keep_ms ~= record.keep_ms or record.granted then
    entry = {
      fence = record.fence, mode = record.mode, limit = record.limit, host = record.host,
      pid = record.pid, user = record.user, cmd = record.cmd, note = record.note,
      since = record.since, exp = record.exp, keep = keep, keep_ms = keep_ms,
    }
    json = cjson.encode(entry)
  end
  -- (Else the holder's own record stands for the entry: its count and ttl are extra fields
  -- that readers of the history pass over, and one JSON encoding fewer is server time saved.)
  redis.call('ZADD', key, record.fence, json)
  lock.history_count, lock.history_written, lock.history_kept = lock.history_count + 1, true, entry
end

-- Replaces history entry `old` (its JSON) with `entry`, scored by `fence`: the new one is
-- added first, so the key never empties on the way. (Redis deletes an empty sorted set, and a
-- Cluster node whose slot is migrating refuses a script's write to a key it no longer has,
-- half-way through the script.)
local function history_replace(lock, old, fence, entry, json)
  json = json or cjson.encode(entry)
  if json == old then return end
  redis.call('ZADD', lock.key.history, fence, json)
  redis.call('ZREM', lock.key.history, old)
  lock.history_written = true
end

-- Changes the entry of `fence` with `change(entry)`; nothing when the history has none (it
-- was trimmed, or written before the history existed). `edit(json)`, if given, makes the same
-- change to the entry's JSON text, or returns nil when it cannot (then the entry is decoded):
-- a renewal or a release then costs the server no JSON decoding and encoding of the entry.
local function history_change(lock, fence, change, edit)
  local key = lock.key.history
  if not key or not fence then return end
  local found = redis.call('ZRANGEBYSCORE', key, fence, fence, 'LIMIT', 0, 1)[1]
  -- ('{' and '}': an object, as every entry redlock writes.)
  local edited = edit and found and string.byte(found, 1) == 123 and string.byte(found, -1) == 125
    and edit(found)
  if edited then
    history_replace(lock, found, fence, nil, edited)
    -- The retention it carries, if any (see history_start; cjson spells these names only so).
    lock.history_kept = string.find(edited, '"keep', 1, true) and decode(edited) or nil
    return
  end
  local entry = decode(found)
  if not entry then return end
  change(entry)
  history_replace(lock, found, fence, entry)
  lock.history_kept = entry
end

-- The change that sets an entry's lease end to `exp` (a renewal, a grant claimed), as a
-- change and as an edit of the JSON (see history_change). In JSON text, a quote inside a
-- string is escaped, so `"exp":` followed by digits and a comma or the closing brace is the
-- field and its whole value.
local function lease_reset(exp)
  return function(entry) entry.exp = exp end, function(json)
    local edited, found = string.gsub(json, '"exp":%d+([,}])', '"exp":' .. int(exp) .. '%1', 1)
    return found == 1 and edited or nil
  end
end

-- The first `bytes` bytes of UTF-8 `text`, never cutting a character in two (a reader would
-- find the record invalid UTF-8).
local function utf8_prefix(text, bytes)
  if #text <= bytes then return text end
  local cut = bytes
  while cut > 0 do
    local next_byte = string.byte(text, cut + 1)
    if next_byte < 0x80 or next_byte >= 0xC0 then break end
    cut = cut - 1
  end
  return string.sub(text, 1, cut)
end

-- The change that ends an entry (`how`: released, forced, given back), with the exit status
-- and signal the holder reported, and why it ended ('' = not said: who forced it, a limit that
-- stopped the command), if any.
-- Also as an edit of the JSON (see history_change): the fields appended before its closing
-- brace, when none of them is there yet and the exit status and signal are whole numbers.
local function ended(now, how, exit, signal, why)
  if why ~= nil and why ~= '' then why = utf8_prefix(why, 256) else why = nil end
  return function(entry)
    entry.ended, entry.outcome, entry.exit, entry.signal = now, how, tonumber(exit), tonumber(signal)
    if why then entry.why = why end
  end, function(json)
    local fields = {',"ended":', int(now), ',"outcome":', cjson.encode(how)}
    for name, value in pairs({exit = exit, signal = signal}) do
      if value ~= '' then
        if not string.match(value, '^%-?%d+$') then return nil end
        fields[#fields + 1] = ',"' .. name .. '":' .. value
      end
    end
    if why then fields[#fields + 1] = ',"why":' .. cjson.encode(why) end
    for _, name in ipairs({'"ended":', '"outcome":', '"exit":', '"signal":', '"why":'}) do
      if string.find(json, name, 1, true) then return nil end
    end
    return string.sub(json, 1, -2) .. table.concat(fields) .. '}'
  end
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

-- A new holder record for a request or queue entry (`who`: mode, limit, host, pid, user, cmd,
-- note, and the history's retention it asks for: keep, keep_ms). The fence is kept as a
-- string: see int().
local function holder_record(who, fence, now, ttl)
  return {
    mode = who.mode, limit = who.limit, count = 1, fence = int(fence), host = who.host,
    pid = who.pid, user = who.user, cmd = who.cmd, note = who.note, since = now, ttl = ttl,
    exp = now + ttl, keep = who.keep, keep_ms = who.keep_ms,
  }
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
