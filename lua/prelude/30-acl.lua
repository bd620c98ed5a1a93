-- ACL: the questions a script asks (Redis 7) before its first write, so that a write the user may
-- not make refuses the script while nothing has changed.
-- (lua/prelude/ is joined in file-name order, then a script's own file: see lua/README.md.)

-- Whether the user may run `command` on `key` (with its other arguments: Redis reads a
-- command's keys from them): nil, or the error reply that refuses the script. Scripts ask about
-- each write they will make before their first one (check_writes). Redis before 7.0 cannot
-- ask; there an ACL that denies a write still fails the script part-way (grant redlock's user
-- the commands of docs/servers.md, "ACL").
-- (The function read once: an acquisition asks some 45 questions, and reading it from the
-- script's globals twice for each cost the server about 19,000 instructions per run cycle.)
local acl_check_cmd = redis.acl_check_cmd
local function denied(command, key, ...)
  if not acl_check_cmd or acl_check_cmd(command, key, ...) then return nil end
  return redis.error_reply('NOPERM this user may not run ' .. command .. ' on ' .. key ..
    ', which redlock needs; nothing was changed')
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
  if not acl_check_cmd then return nil end
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

-- How many of `keys` exist (EXISTS), or nil when the user may not ask: the ACL of
-- docs/servers.md did not grant EXISTS before redlock used it, and a server older than 7.0
-- cannot be asked (there EXISTS is not used).
local function existing(...)
  if acl_check_cmd and acl_check_cmd('EXISTS', ...) then return redis.call('EXISTS', ...) end
  return nil
end

