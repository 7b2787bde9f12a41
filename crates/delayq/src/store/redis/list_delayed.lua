-- list_delayed: one page of a queue's delayed jobs due in the minutes given, by (run_at, id)
-- (read-only). Rust finds the minutes in `dueidx` first (list.rs). Each minute's jobs are
-- those of the timeline scored in it, those of its far window list and those placed ahead in
-- the queue's groups waiting in it (lib.lua): all are read (every topic's, the groups only
-- this queue's), their records decoded, the queue's delayed ones due in that minute kept and
-- sorted; so a call costs the jobs of every topic due in its minutes.
-- KEYS: the shard's keys (lib.lua), then KEYS[10..9+m] the window lists of the m minutes.
-- ARGV[1] channel, ARGV[2] now (unused), ARGV[3] queue, ARGV[4] run_at to start after ('' =
-- from the first), ARGV[5] id to start after (with ARGV[4]), ARGV[6] limit, ARGV[7..6+m] the
-- minutes (floor(run_at / 60000)), in order.
-- Returns {full, id, record, ...}: full = 1 when the page filled (more may follow).
local function lt(a, b) -- bytewise a < b (Lua's `<` on strings follows the locale)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local queue, limit = ARGV[3], tonumber(ARGV[6])
local after_at, after_id = nil, ARGV[5]
if ARGV[4] ~= '' then after_at = tonumber(ARGV[4]) end
local out = {0}
local got = 0
for k = 7, #ARGV do
  local minute = tonumber(ARGV[k])
  local lo = minute * WINDOW_MS
  local hi = lo + WINDOW_MS - 1
  local seen, found = {}, {}
  local function consider(id)
    if seen[id] then return end
    seen[id] = true
    local raw = redis.call('HGET', JOBS, id)
    if not raw then return end
    local ok, r = pcall(cmsgpack.unpack, raw)
    if not ok or type(r) ~= 'table' or type(r[2]) ~= 'string' then return end
    local j = decode(r)
    local t = j[RUN_AT]
    if j[S] == 'd' and j[QUEUE] == queue and type(t) == 'number' and t >= lo and t <= hi
      and (after_at == nil or t > after_at or (t == after_at and lt(after_id, id))) then
      -- A job placed ahead is stored p: listed as the delayed job it is.
      if j[PRE] then raw = string.sub(raw, 1, 2) .. 'd' .. string.sub(raw, 4) end
      found[#found + 1] = {t, id, raw}
    end
  end
  local group_at = #queue + 2
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', TIMELINE, lo, hi)) do
    if string.byte(id, 1) == 1 then
      -- A waiting group of jobs placed ahead (lib.lua): this queue's lists its ready entries.
      if string.sub(id, 2, group_at) == queue .. '\0' then
        local prefix = string.sub(id, 2)
        local prio, run_at = struct.unpack('>I4I6', id, group_at + 1)
        local next_ = ready_member_of(queue, prio, run_at + 1, 0, '')
        for _, m in ipairs(redis.call('ZRANGEBYLEX', READY, '[' .. prefix, '(' .. next_)) do
          consider(string.sub(m, ready_id_at(queue)))
        end
      end
    else
      consider(id)
    end
  end
  for _, id in ipairs(redis.call('LRANGE', KEYS[3 + k], 0, -1)) do consider(id) end
  table.sort(found, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    return lt(x[2], y[2])
  end)
  for _, f in ipairs(found) do
    out[#out + 1] = f[2]
    out[#out + 1] = f[3]
    got = got + 1
    if got == limit then
      out[1] = 1
      return out
    end
  end
end
return out
