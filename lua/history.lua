-- history: read a lock's history, oldest hold first, without changing it.
-- Returns {now_ms, entry_json...}: at most HISTORY_CAP entries (see the prelude), each
-- {fence, mode, limit, host, pid, user, cmd, note, since, exp, and once the hold is over:
-- ended, outcome, exit, signal}. An entry without `ended` whose `exp` is not after now_ms is a
-- hold whose lease ran out.
local refused, key = inputs({'history'}, {})
if refused then return refused end
local count
refused, count = read(key.history, 'ZCARD', key.history)
if refused then return refused end
local reply = {server_now()}
if count == 0 then return reply end
-- The newest HISTORY_CAP: more are there only while an excess added by hand is trimmed.
for _, json in ipairs(redis.call('ZRANGE', key.history, -HISTORY_CAP, -1)) do
  if not decode(json) then return foreign(key.history, 'holds a member') end
  reply[#reply + 1] = json
end
return reply
