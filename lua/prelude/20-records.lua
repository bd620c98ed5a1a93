-- Records: the JSON of holder records, queue entries and history entries, decoded only when every
-- field is of the type and size the scripts compute with.
-- (lua/prelude/ is joined in file-name order, then a script's own file: see lua/README.md.)

-- The type of each field of the records redlock writes (holder records, queue entries,
-- history entries). The scripts do arithmetic on these, compare them, pass them to Redis and
-- encode them again, after their first write: a record whose fields would make one of those
-- calls fail must be refused before it. (Built at the first record decoded: a script that
-- decodes none, as an acquisition of a free lock, spends no server time on it.)
local FIELD_TYPES
local function field_types()
  FIELD_TYPES = FIELD_TYPES or {
    exp = 'number', since = 'number', ttl = 'number', count = 'number', limit = 'number',
    pid = 'number', ended = 'number', exit = 'number', signal = 'number', tok = 'string',
    mode = 'string', host = 'string', user = 'string', cmd = 'string', note = 'string',
    outcome = 'string', over = 'boolean', why = 'string', keeper = 'number', steady = 'number',
    due = 'number', granted = 'boolean', claim = 'number', keep = 'number', keep_ms = 'number',
    wid = 'string',
  }
  return FIELD_TYPES
end

-- The largest whole number a script computes with: Lua's numbers hold every integer up to
-- 2^53 - 1, and no further.
local MAX_WHOLE = 9007199254740991
-- The largest number a record's field may hold: cjson writes numbers with 14 significant
-- digits, so a larger one would come back in exponent form, which no reader takes for a whole
-- number (times in ms stay below it until the year 5138).
local MAX_FIELD_NUMBER = 99999999999999

-- Whether `value` may stand in a record as a field whose type is `wanted` ('fence', a type
-- of FIELD_TYPES, or nil for a field redlock does not compute with): a string, a boolean, or a
-- finite number (cjson cannot encode infinity or NaN, which it decodes), never a nested table.
-- The numbers scripts compute with (the fields of FIELD_TYPES) are whole and within
-- MAX_FIELD_NUMBER, a fence within MAX_WHOLE: sums of a few of them print as integers (int),
-- are taken by every command that takes a time, a score or a count, and are written back as
-- they were read, so no call after the first write can fail on them and no reader finds them
-- changed. (Run for every field of every record read: operators, not calls of math's
-- functions, which cost the server several hundred instructions each.)
local function flat_value(wanted, value)
  local kind = type(value)
  if kind == 'string' then
    -- A fence is kept as a string of digits (see int()); older records hold a number.
    if wanted == 'fence' then return string.match(value, '^%d+$') ~= nil end
    return wanted == nil or wanted == 'string'
  elseif kind == 'number' then
    -- (value - value is 0 for a finite number, NaN for NaN and for either infinity.)
    if value - value ~= 0 then return false end
    if wanted == nil then return true end
    -- (value % 1 is 0 exactly when value is whole.)
    local bound = wanted == 'fence' and MAX_WHOLE or MAX_FIELD_NUMBER
    if value % 1 ~= 0 or value > bound or value < -bound then return false end
    if wanted == 'fence' then return value >= 0 end
    return wanted == 'number'
  end
  return kind == 'boolean' and (wanted == nil or wanted == 'boolean')
end

-- Decodes a holder record, queue entry or history entry; nil when it is not one redlock
-- wrote: not a flat JSON object, a field of another type, or no mode, since or exp (or no
-- limit for a semaphore).
local function decode(json)
  if type(json) ~= 'string' then return nil end
  local ok, record = pcall(cjson.decode, json)
  if not ok or type(record) ~= 'table' then return nil end
  local types = field_types()
  for name, value in pairs(record) do
    local wanted = name == 'fence' and 'fence' or types[name]
    if type(name) ~= 'string' or not flat_value(wanted, value) then return nil end
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

-- Whether `text` is shaped like a token (32 hex digits) or a waiter id (16).
local function token_shaped(text, length)
  return #text == length and string.match(text, '^%x+$') ~= nil
end

-- `value` (a record's field) as a whole number from `low` to `high`; `default` when absent.
local function bounded(value, default, low, high)
  if type(value) ~= 'number' then return default end
  return math.max(low, math.min(high, math.floor(value)))
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

