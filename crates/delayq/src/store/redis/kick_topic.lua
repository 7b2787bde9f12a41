-- kick_topic: returns up to `max` of this shard's dead jobs of a topic, oldest burial first,
-- to ready. Stale dead entries are dropped and not counted.
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] topic, ARGV[4] max.
-- Returns how many were kicked.
local topic = ARGV[3]
local max = tonumber(ARGV[4])
local n = 0
while n < max do
  local want = max - n
  local heads = redis.call('ZRANGEBYLEX', DEAD, topic_min(topic), topic_max(topic),
    'LIMIT', 0, want)
  for _, m in ipairs(heads) do
    local id = string.sub(m, dead_id_at(topic))
    local j = load_lenient(id)
    if j and j[S] == 'b' and dead_member(id, j) == m then
      unindex(id, j)
      kick_record(j)
      put(id, j)
      n = n + 1
    else
      redis.call('ZREM', DEAD, m)
    end
  end
  -- A short read means the topic's range is exhausted: no second, empty read.
  if #heads < want then break end
end
flush_events()
return n
