-- reserve: hands out up to `max` ready jobs of this shard, topics in the order given and,
-- within a topic, (priority, run_at, seq) order. Each becomes reserved until now + ttr with
-- attempts + 1. A ready entry whose record does not match (stale) is dropped and skipped, so
-- it can neither be delivered nor end the scan early.
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] max, ARGV[4..] topics in preference order.
-- Returns {id, record, id, record, ...} in delivery order.
local max = tonumber(ARGV[3])
local out = {}
local got = 0
for t = 4, #ARGV do
  if got >= max then break end
  local topic = ARGV[t]
  while got < max do
    local want = max - got
    local heads = redis.call('ZRANGEBYLEX', READY, topic_min(topic), topic_max(topic),
      'LIMIT', '0', num(want))
    for _, m in ipairs(heads) do
      local id = string.sub(m, ready_id_at(topic))
      local j = load_lenient(id)
      if j and j[S] == 'r' and ready_member(id, j) == m then
        unindex(id, j)
        j[S] = 'x'
        j[ATT] = j[ATT] + 1
        j[RU] = after(NOW, j[TTR])
        out[#out + 1] = id
        out[#out + 1] = put(id, j)
        got = got + 1
      else
        redis.call('ZREM', READY, m)
      end
    end
    -- A short read means the topic's range is exhausted: no second, empty read.
    if #heads < want then break end
  end
end
flush_events()
return out
