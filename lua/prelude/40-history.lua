-- History: one entry per hold, scored by its fence, started when the hold starts and changed when
-- its lease is reset or it ends; and how long it is kept.
-- (lua/prelude/ is joined in file-name order, then a script's own file: see lua/README.md.)

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
    -- (cjson spells these names only so.)
    if string.find(json, '"ended":', 1, true) or string.find(json, '"outcome":', 1, true)
        or string.find(json, '"exit":', 1, true) or string.find(json, '"signal":', 1, true)
        or string.find(json, '"why":', 1, true) then
      return nil
    end
    -- (`how` is one of the three words above: nothing in it to escape.)
    local fields = {',"ended":', int(now), ',"outcome":"', how, '"'}
    if exit ~= '' then
      if not string.match(exit, '^%-?%d+$') then return nil end
      fields[#fields + 1] = ',"exit":' .. exit
    end
    if signal ~= '' then
      if not string.match(signal, '^%-?%d+$') then return nil end
      fields[#fields + 1] = ',"signal":' .. signal
    end
    if why then fields[#fields + 1] = ',"why":' .. cjson.encode(why) end
    return string.sub(json, 1, -2) .. table.concat(fields) .. '}'
  end
end

