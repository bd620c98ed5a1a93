-- ACL: the questions a script asks (Redis 7) before its first write, so that a write the user may
-- not make refuses the script while nothing has changed.
-- (lua/prelude/ is joined in file-name order, then a script's own file: see lua/README.md.)

-- The error reply that refuses a script for `command` on `key`, which the user may not run.
local function refusal(command, key)
  return redis.error_reply('NOPERM this user may not run ' .. command .. ' on ' .. key ..
    ', which redlock needs; nothing was changed')
end

-- Scripts ask whether the user may run each write they will make (`command` on `key`, with its
-- other arguments: Redis reads a command's keys from them) before their first one
-- (check_writes). Redis before 7.0 cannot ask; there an ACL that denies a write still fails
-- the script part-way (grant redlock's user the commands of docs/servers.md, "ACL").
-- (The function read once: an acquisition asks some 45 questions, and reading it from the
-- script's globals twice for each cost the server about 19,000 instructions per run cycle.)
local acl_check_cmd = redis.acl_check_cmd

-- Asks the questions of `questions(ask, ...)`: `ask(command, key, ...)` calls joined by `and`,
-- true when the user may make all of them. They are asked with the server's own function as
-- `ask`, a call each (a Lua helper around it would cost the server as much again per
-- question); when one is denied, again with a helper that keeps the first one denied, for
-- the reply that names it. Returns nil, or that reply.
local function first_denied(questions, ...)
  if not acl_check_cmd or questions(acl_check_cmd, ...) then return nil end
  local refused
  questions(function(command, key, ...)
    if acl_check_cmd(command, key, ...) then return true end
    refused = refusal(command, key)
    return false
  end, ...)
  return refused
end

-- The reads that a lock's later calls make (a release, a renewal, a waiter's look): an
-- acquisition asks about them with its writes (check_writes, `all`), or a user who may write
-- but not read could take a lock it cannot let go of. Each once, of the key it reads most (an
-- ACL that tells one lock's keys apart is asked about by the writes' questions); the script's
-- own reads need no question (a denied one fails the script before its first write).
local function later_reads(ask, key)
  return ask('HLEN', key.holders) and ask('HGET', key.holders, 'f')
    and ask('HMGET', key.holders, 'f') and ask('ZCARD', key.leases)
    and ask('ZCOUNT', key.leases, '1', '2') and ask('ZRANGE', key.leases, '0', '1')
    and ask('ZRANGEBYSCORE', key.leases, '1', '2') and ask('ZRANK', key.queue, 'm')
    and ask('GET', key.fence) and ask('TYPE', key.wake) and ask('PTTL', key.queue)
end

-- The writes a script that changes a lock will make, by what it will do (`does`): `put`
-- holder records, `remove` some (or expired ones), `drop` both holder keys at once, take a
-- `fence`, write the `history`, the `queue` (entries, places, the caller's wake list and other
-- waiters'), a give-up's `cancel` mark; or `all` of them, and the reads of the lock's later
-- calls (later_reads). As questions for first_denied.
local function writes(ask, key, does)
  local all = does.all
  return (not (all or does.put) or (ask('HSET', key.holders, 'f', 'v') and ask('ZADD', key.leases, '1', 'm')))
    and (not (all or does.remove) or (ask('HDEL', key.holders, 'f') and ask('ZREM', key.leases, 'm')))
    -- (Holders that remain after a put or a removal get the latest lease's expiry: settle.)
    and (not (all or does.put or does.remove) or (ask('PEXPIREAT', key.holders, '1')
      and ask('PEXPIREAT', key.leases, '1')))
    and (not (all or does.drop) or ask('DEL', key.holders, key.leases))
    and (not (all or does.fence) or (ask('INCR', key.fence) and ask('SET', key.fence, '1')))
    and (not (all or does.history) or (ask('ZADD', key.history, '1', 'm') and ask('ZREM', key.history, 'm')
      and ask('PEXPIRE', key.history, '1')))
    and (not (all or does.queue) or (ask('ZADD', key.queue, '1', 'm') and ask('ZREM', key.queue, 'm')
      and ask('PEXPIREAT', key.queue, '1') and ask('HSET', key.waiters, 'f', 'v')
      and ask('HDEL', key.waiters, 'f') and ask('PEXPIREAT', key.waiters, '1')
      and ask('DEL', key.wake) and ask('RPUSH', wake_key(key, '0'), 'v')
      and ask('PEXPIRE', wake_key(key, '0'), '1')))
    and (not (all or does.cancel) or ask('SET', key.cancel, '1', 'PX', '1'))
    and (not all or later_reads(ask, key))
end

-- Checks, before the first write, the writes a script that changes a lock will make (see
-- `writes`). Each check costs the server time (about as much as a read): a release, a
-- renewal, asks only about what it will write; an acquisition asks about `all`, so that a user
-- who could not let go of a lock, or leave its queue, is refused before it takes or joins it.
-- Returns nil, or the error reply of the first write the user may not make.
local function check_writes(lock, does)
  return first_denied(writes, lock.key, does)
end

-- How many of `keys` exist (EXISTS), or nil when the user may not ask: the ACL of
-- docs/servers.md did not grant EXISTS before redlock used it, and a server older than 7.0
-- cannot be asked (there EXISTS is not used).
local function existing(...)
  if acl_check_cmd and acl_check_cmd('EXISTS', ...) then return redis.call('EXISTS', ...) end
  return nil
end

