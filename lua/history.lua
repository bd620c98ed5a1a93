-- history: read a lock's history, oldest hold first, without changing it.
-- Returns {now_ms, entry_json...}: the holds its retention keeps (see the prelude: the newest
-- entry says how many; HISTORY_CAP unless a holder asked for more or fewer), each
-- {fence, mode, limit, host, pid, user, cmd, note, since, exp, and once the hold is over:
-- ended, outcome, exit, signal; keep and keep_ms when a retention was asked for}. An entry
-- without `ended` whose `exp` is not after now_ms is a hold whose lease ran out.
local refused, key = inputs(1, 0, {history = KEYS[1]}, {})
if refused then return refused end
local count
refused, count = read(key.history, 'ZCARD', key.history)
if refused then return refused end
local reply = {server_now()}
if count == 0 then return reply end
-- The newest `cap`: more are there only while an excess added by hand is trimmed.
local newest = redis.call('ZRANGE', key.history, -1, -1)[1]
local cap = retention(decode(newest))
-- Every member as it is: one redlock did not write (added by hand) is redlock's caller's to
-- skip with a warning, as it skips a record it cannot read, not a reason to show nothing (the
-- scripts that write the history go on writing beside it).
for _, json in ipairs(redis.call('ZRANGE', key.history, -cap, -1)) do
  reply[#reply + 1] = json
end
return reply
