-- inspect: read the state of one lock without changing it.
-- KEYS[1] holders hash, KEYS[2] fence counter, KEYS[3] queue hash
-- Returns {now_ms, last_fence or false, {holder_json...}, {waiter_json...}}: live holders, and
-- live waiters in queue order (without their tokens).
local holders_key, fence_key, queue_key = KEYS[1], KEYS[2], KEYS[3]

local now = server_now()
local refused, holders = records(holders_key, now)
if refused then return refused end
local queue, fence
refused, queue = records(queue_key, now)
if refused then return refused end
refused, fence = last_fence(fence_key)
if refused then return refused end
table.sort(queue, function(a, b) return a[2].seq < b[2].seq end)

local holder_json, waiter_json = {}, {}
for _, holder in ipairs(holders) do holder_json[#holder_json + 1] = cjson.encode(holder[2]) end
for _, entry in ipairs(queue) do
  entry[2].tok = nil
  waiter_json[#waiter_json + 1] = cjson.encode(entry[2])
end
return {now, fence, holder_json, waiter_json}
