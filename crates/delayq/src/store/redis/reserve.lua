-- reserve: hands out up to `max` ready jobs of this shard, topics in the order given and,
-- within a topic, (priority, run_at, seq) order. Each becomes reserved until now + ttr with
-- attempts + 1. A ready entry whose record does not match (stale) is dropped and skipped, so
-- it can neither be delivered nor end the scan early. Jobs placed ahead (lib.lua) are handed
-- out once their group is promoted; a group found due and not yet promoted is promoted here.
-- Flow control (lib.lua FLOW): a queue whose topic has settings hands out nothing while
-- paused, no more than its bucket's whole tokens (refilled to now at the shard's share of the
-- rate, up to its share of the burst) and no more than its share of max_in_flight less the
-- topic's reserved jobs (pull and callback). When jobs are left waiting for a token, the
-- timeline gets the member \0<queue> at the next token's time (tick.lua announces it). While
-- the shard has no settings at all, a call pays one EXISTS (lib.lua flow_settings).
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] max, ARGV[4..] topics in preference order.
-- Returns {id, record, id, record, ...} in delivery order.
local max = tonumber(ARGV[3])
local out = {}
local got = 0

for t = 4, #ARGV do
  if got >= max then break end
  local topic = ARGV[t]
  local room, bucket = allowance(topic, max - got)
  local stop = got + room
  local before = got
  local id_at = ready_id_at(topic)
  local lo, hi = topic_min(topic), topic_max(topic)
  -- Groups of jobs placed ahead met in this call: true while one waits, false once promoted.
  local waits = {}
  while got < stop do
    -- At most 500 entries a read: every command's arguments stay within Lua's stack.
    local want = math.min(stop - got, 500)
    local heads = redis.call('ZRANGEBYLEX', READY, lo, hi, 'LIMIT', '0', num(want))
    if #heads == 0 then break end
    -- One read of every record, one removal of every entry (taken or stale) and one write of
    -- every reserved record per batch.
    local ids = {}
    for i, m in ipairs(heads) do ids[i] = string.sub(m, id_at) end
    local raws = redis.call('HMGET', JOBS, unpack(ids))
    local writes, seen = {}, {}
    -- The priority after that of a group not due yet, whose entries end the scan of theirs.
    local next_prio = nil
    for i, m in ipairs(heads) do
      local id, raw = ids[i], raws[i]
      local state = 'r'
      if raw and string.byte(raw, 3) == 112 and string.byte(raw, 2) == 0xa1 then
        -- Placed ahead (lib.lua): the entry names its group. One that waits is promoted here
        -- once due (the timer may not have reached it yet); one that is not due holds back its
        -- priority's later entries too, which are due later (or ready by a clock ahead of
        -- this call's: they wait for the group's tick).
        state = 'p'
        local g, prio, run_at = member_group(m, id_at)
        local w = waits[g]
        if w == nil then w = group_waits(g) end
        if w and run_at > NOW then
          waits[g] = true
          next_prio = prio + 1
          break
        end
        if w then fire_group(g) end
        waits[g] = false
      end
      seen[#seen + 1] = m
      local packed, until_ = nil, nil
      if raw then
        packed, until_ = reserve_stored(id, raw, m, state)
        if packed == nil and until_ == true then packed, until_ = reserve_working(id, m) end
      end
      if packed then
        set_timer(id, until_)
        writes[#writes + 1] = id
        writes[#writes + 1] = packed
        out[#out + 1] = id
        out[#out + 1] = packed
        got = got + 1
      end
    end
    if #seen > 0 then redis.call('ZREM', READY, unpack(seen)) end
    local n = #writes / 2
    if n > 0 then
      redis.call('HSET', JOBS, unpack(writes))
      count(topic, 'r', -n)
      count(topic, 'x', n)
    end
    if next_prio then
      if next_prio > 0xFFFFFFFF then break end
      lo = '[' .. topic .. '\0' .. struct.pack('>I4', next_prio)
    elseif #heads < want then
      -- A short read means the topic's range is exhausted: no second, empty read.
      break
    end
  end
  if bucket then spend(topic, bucket, got - before) end
end
flush_events()
return out
