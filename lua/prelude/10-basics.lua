-- prelude: the helpers every script shares. lua/prelude/ holds them by concern, one file each
-- (basics, records, ACL, history, admission, queue, hand-off, the lock opened and settled),
-- joined in file-name order at build time and followed by a script's own file: a fixed text, so
-- each script keeps a fixed SHA. Everything here is local to the script. This first file: the
-- rules every helper keeps, the reply codes, the server version check, a script's named inputs,
-- whole numbers as digits, reads that double as type checks, the server's clock, and the names
-- of the wake lists.
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

-- A script's named inputs: `key` and `arg`, which the script builds in its call from KEYS and
-- ARGV in order (`key.<name>` = KEYS[i], `arg.<name>` = ARGV[i]), `key_count` and `arg_count`
-- entries each. The same names, in the same order, are declared on the Rust side
-- (src/scripts.rs; a test compares them, the indexes and the counts). (Built by the script's
-- table constructors, which size a table once: filled by name in a loop, each grew and was
-- rehashed on the way, some 20,000 server instructions per call.) Returns nil, key, arg; or an
-- error reply when the caller sent another number of either.
local function inputs(key_count, arg_count, key, arg)
  if #KEYS ~= key_count or #ARGV ~= arg_count then
    return redis.error_reply('ERR redlock script called with ' .. #KEYS .. ' keys and ' .. #ARGV ..
      ' arguments; it takes ' .. key_count .. ' and ' .. arg_count .. ' (mixed redlock versions?)')
  end
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
  -- (An error comes back as a table with `err`, which no reply of a read has.)
  local reply = redis.pcall(...)
  if type(reply) ~= 'table' or not reply.err then return nil, reply end
  local message = reply.err
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
  return seconds * 1000 + (micros - micros % 1000) / 1000, seconds * 1000000 + micros
end

-- The server's clock, in ms.
local function server_now()
  return (server_clock())
end

-- The wake list of waiter `id`, named from the queue key (same hash tag, so the same Cluster
-- slot): a script handing the lock over cannot know in advance whom to pass in KEYS.
local function wake_key(key, id)
  return string.sub(key.queue, 1, -7) .. ':wake:' .. id
end

-- The longest lease a redlock call asks for, 30 days (a --ttl or --min-hold: src/duration.rs,
-- MAX; a test compares them).
-- A lease read back from the index after a script's first write (settle) is kept within it: a
-- score someone wrote by hand may be anything, and a PEXPIREAT it made fail would leave the
-- script half done.
local LONGEST_LEASE_MS = 2592000000

