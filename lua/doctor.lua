-- doctor: which of the commands redlock sends, and its scripts call, the current user may not
-- run on a lock's keys (Redis 7's redis.acl_check_cmd; nothing on older servers, which cannot
-- ask). Read-only.
-- Every command is asked about with a whole, valid list of arguments: Redis 7.0 reads the keys
-- of a command from its arguments, and crashes on a command given too few.
-- Returns (codes: REPLY.doctor, below) {checked, {denied command...}, {denied Pub/Sub
-- command...}, {denied optional command...}}, or {unchecked} on a server that cannot ask: the
-- second list is about quorum mode's release notices on the lock's channel, which are best
-- effort; the third about commands the scripts use only when allowed (EXISTS: without it an
-- acquisition reads the lock's keys one by one, which costs the server more time).

-- The status code that opens the reply, by name (REPLY.doctor.<name>): only the number crosses
-- to redlock, which names the same codes (src/lock/reply.rs: a test compares the two).
local REPLY = {
  doctor = {checked = 1, unchecked = 0},
}
local refused, key, arg = inputs(1, 2,
  {sample = KEYS[1]},
  {script_sha = ARGV[1], channel = ARGV[2]})
if refused then return refused end
if not redis.acl_check_cmd then return {REPLY.doctor.unchecked} end
local k = key.sample
local checks = {
  {'evalsha', arg.script_sha, '1', k}, {'eval', 'return 1', '1', k}, {'blpop', k, '1'},
  {'scan', '0'}, {'ping'}, {'type', k}, {'get', k}, {'set', k, '1'}, {'time'},
  {'hgetall', k}, {'hlen', k}, {'hget', k, 'f'}, {'hmget', k, 'f'}, {'hset', k, 'f', 'v'},
  {'hdel', k, 'f'}, {'zcard', k}, {'zcount', k, '0', '1'}, {'zrange', k, '0', '1'},
  {'zrangebyscore', k, '0', '1'}, {'zrank', k, 'm'}, {'zadd', k, '1', 'm'}, {'zrem', k, 'm'},
  {'incr', k}, {'pttl', k}, {'pexpire', k, '1'}, {'pexpireat', k, '1'}, {'del', k},
  {'rpush', k, 'v'},
}
local notices = {{'publish', arg.channel, 'r'}, {'subscribe', arg.channel}}
local optional = {{'exists', k, k}}
local function denied_of(list)
  local names = {}
  for _, check in ipairs(list) do
    if not redis.acl_check_cmd(unpack(check)) then names[#names + 1] = check[1] end
  end
  return names
end
return {REPLY.doctor.checked, denied_of(checks), denied_of(notices), denied_of(optional)}
