-- peek_ready: read-only. This shard's first `k` ready entries in delivery order (topic
-- preference, then priority, run_at, seq), so Rust can merge shards into the global order.
-- Standalone (does not include lib.lua).
-- KEYS[1] the shard's ready ZSET (layout in lib.lua).
-- ARGV[1] k, ARGV[2..] topics in preference order.
-- Returns {topic index (1-based), member, topic index, member, ...}.
local left = tonumber(ARGV[1])
local out = {}
for t = 2, #ARGV do
  if left <= 0 then break end
  local topic = ARGV[t]
  local heads = redis.call('ZRANGEBYLEX', KEYS[1], '[' .. topic .. '\0', '(' .. topic .. '\1',
    'LIMIT', 0, left)
  for _, m in ipairs(heads) do
    out[#out + 1] = t - 1
    out[#out + 1] = m
  end
  left = left - #heads
end
return out
