-- list_reserved: one page of a queue's reserved jobs by (deadline, id), read from the
-- timeline (read-only). The timeline holds every topic's reserved and near delayed jobs, so
-- a call reads up to `budget` entries from the cursor on; it stops early when the queue has
-- no reserved job on this shard, or when a walk from the start has found them all (counts).
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now (unused), ARGV[3] queue, ARGV[4] deadline to start after ('' =
-- from the first), ARGV[5] id to start after (with ARGV[4]), ARGV[6] limit, ARGV[7] budget.
-- Returns {status, score, id, id, record, ...}: status 'full' (the page filled; more may
-- follow), 'end' (nothing after), 'more' (the budget ran out: resume after score, id).
local function lt(a, b) -- bytewise a < b (Lua's `<` on strings follows the locale)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local queue, limit, budget = ARGV[3], tonumber(ARGV[6]), tonumber(ARGV[7])
local total = tonumber(redis.call('HGET', COUNTS, 'x' .. queue) or '0')
if total <= 0 then return {'end', '', ''} end
local start = 0
if ARGV[4] ~= '' then
  -- The rank of the first entry after (ARGV[4], ARGV[5]): past the lower scores, then a
  -- binary search among the entries of that score, which Redis keeps in member order.
  local lo = redis.call('ZCOUNT', TIMELINE, '-inf', '(' .. ARGV[4])
  local hi = lo + redis.call('ZCOUNT', TIMELINE, ARGV[4], ARGV[4])
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZRANGE', TIMELINE, mid, mid)[1]
    if m == nil or not lt(ARGV[5], m) then lo = mid + 1 else hi = mid end
  end
  start = lo
end
local entries = redis.call('ZRANGE', TIMELINE, start, start + budget - 1, 'WITHSCORES')
local out = {'end', '', ''}
local got = 0
for i = 1, #entries, 2 do
  local id = entries[i]
  local raw = redis.call('HGET', JOBS, id)
  if raw then
    local ok, r = pcall(cmsgpack.unpack, raw)
    if ok and type(r) == 'table' and type(r[2]) == 'string' then
      local j = decode(r)
      if j[S] == 'x' and j[QUEUE] == queue then
        out[#out + 1] = id
        out[#out + 1] = raw
        got = got + 1
        if ARGV[4] == '' and got >= total then return out end
        if got == limit then
          out[1], out[2], out[3] = 'full', entries[i + 1], id
          return out
        end
      end
    end
  end
end
if #entries == 2 * budget then
  out[1], out[2], out[3] = 'more', entries[#entries], entries[#entries - 1]
end
return out
