-- inspect: read the state of one lock without changing it.
-- Returns {now_ms, last_fence or false, {holder_json...}, {waiter_json...}, live_holders,
-- queue_length, last_run_json or false, last_success_json or false, {holder_tid...}}: up to
-- max_holders live holders (earliest expiry first), each with its `tid` in the last list at the
-- same place (the first 16 hex digits of its token's SHA-1, which tells one acquisition on
-- several masters from another without showing the token), and up to max_waiters live waiters
-- from the head of the queue, in order (without their tokens); the number of live holders, and
-- of entries in the queue (a dead waiter's entry counts until it reaches the head); the history
-- entries of the
-- latest hold that is over (ended, or expired) and, when `last_success` is '1', of the latest
-- that succeeded (released with exit status 0; false otherwise). Finding it may read the whole
-- history (a lock whose holds report no exit status has none): only `metrics` asks.
local refused, key, arg = inputs(6, 3,
  {holders = KEYS[1], leases = KEYS[2], fence = KEYS[3], queue = KEYS[4], waiters = KEYS[5],
   history = KEYS[6]},
  {max_holders = ARGV[1], max_waiters = ARGV[2], last_success = ARGV[3]})
if refused then return refused end
local lock
refused, lock = open_lock(key, {fence = true, unqueued = true})
if refused then return refused end
local now, max_holders, max_waiters = lock.now, tonumber(arg.max_holders), tonumber(arg.max_waiters)
-- How far ahead of the server's clock a hold's times may be and still be believed (`check`
-- leaves out the same: src/cmd/check.rs).
local AHEAD_OF_CLOCK_MS = 60000

local holder_json, holder_tid = {}, {}
if live_count(lock) > 0 then
  local tokens = redis.call('ZRANGEBYSCORE', key.leases, '(' .. int(now), '+inf', 'LIMIT', 0, max_holders)
  for i = 1, #tokens, 1000 do
    local values = redis.call('HMGET', key.holders, unpack(tokens, i, math.min(i + 999, #tokens)))
    for j = 1, #values do
      -- (A lease without a record: the record was deleted by hand; reconcile_holders saw it.)
      if values[j] and not decode_holder(values[j]) then return foreign(key.holders, 'holds a field') end
      if values[j] then
        holder_json[#holder_json + 1] = values[j]
        holder_tid[#holder_tid + 1] = string.sub(redis.sha1hex(tokens[i + j - 1]), 1, 16)
      end
    end
  end
end

-- The first live waiters, examining at most SCAN_BUDGET dead ones besides.
local waiter_json, from = {}, 0
while #waiter_json < max_waiters and from < lock.length and from < max_waiters + SCAN_BUDGET do
  local ids = redis.call('ZRANGE', key.queue, from, from + 99)
  if not ids[1] then break end
  local values = redis.call('HMGET', key.waiters, unpack(ids))
  for i = 1, #ids do
    local entry = decode_entry(values[i])
    if values[i] and not entry then return foreign(key.waiters, 'holds a field') end
    if entry and entry.exp > now and #waiter_json < max_waiters then
      entry.tok = nil
      waiter_json[#waiter_json + 1] = cjson.encode(entry)
    end
  end
  from = from + #ids
end
-- The history holds the entries its retention keeps (more only while an excess added by hand
-- is trimmed): read them from the newest, 100 at a time, until one is over and one succeeded
-- (a success not asked for counts as found, `true`, and is sent as none).
local last_run, last_success = false, arg.last_success ~= '1'
if lock.history_count > 0 then
  local cap = retention(decode(redis.call('ZRANGE', key.history, -1, -1)[1]))
  local stop, done = math.min(lock.history_count, cap), 0
  while done < stop and not (last_run and last_success) do
    local chunk = math.min(100, stop - done)
    local entries = redis.call('ZRANGE', key.history, -(done + chunk), -(done + 1))
    for i = #entries, 1, -1 do
      -- (A member redlock did not write, added by hand, is passed over, as history.lua's
      -- reader passes it over.)
      local entry = decode(entries[i])
      -- (A hold that began or ended ahead of the server's clock was written by hand, or by a
      -- clock stepped back since: it never stands for the last run or success, which readers
      -- would show as "0ms ago" for as long as it lasts, and hide the real ones behind.)
      if entry and math.max(entry.since, entry.ended or 0) > now + AHEAD_OF_CLOCK_MS then entry = nil end
      if entry and not last_run and (entry.ended or entry.exp <= now) then last_run = entries[i] end
      if entry and not last_success and entry.ended and entry.outcome == 'released' and
        entry.exit == 0 then
        last_success = entries[i]
      end
      if last_run and last_success then break end
    end
    done = done + chunk
  end
end
if last_success == true then last_success = false end
return {now, lock.last_fence or false, holder_json, waiter_json, live_count(lock), lock.length,
  last_run, last_success, holder_tid}
