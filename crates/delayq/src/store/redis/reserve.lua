-- reserve: hands out up to `max` ready jobs of this shard, topics in the order given and,
-- within a topic, (priority, run_at, seq) order. Each becomes reserved until now + ttr with
-- attempts + 1. A ready entry whose record does not match (stale) is dropped and skipped, so
-- it can neither be delivered nor end the scan early.
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

-- A count as this run sees it (its own changes are summed until flush_events).
local function current(f)
  return tonumber(redis.call('HGET', COUNTS, f) or '0') + (count_delta[f] or 0)
end

local function has_ready(queue)
  flush_index()
  return #redis.call('ZRANGEBYLEX', READY, topic_min(queue), topic_max(queue), 'LIMIT', '0', '1')
    > 0
end

-- How many of `want` jobs of `queue` its flow control lets out, and its bucket (nil: no rate).
local function allowance(queue, want)
  local topic = queue_topic(queue)
  local raw = flow_settings(topic)
  if not raw or want == 0 or not has_ready(queue) then return want, nil end
  local f = cmsgpack.unpack(raw)
  if f[2] == 1 then
    redis.call('HINCRBY', FLOW, 'hp' .. topic, 1)
    return 0, nil
  end
  local room, bucket = want, nil
  local rate, burst, limit = f[6], f[7], f[8]
  if rate > 0 then
    local b = redis.call('HGET', FLOW, 'b' .. topic)
    local tokens, stamp = burst, NOW
    if b then
      local t = cmsgpack.unpack(b)
      tokens, stamp = t[1], t[2]
    end
    if NOW > stamp then
      tokens = math.min(burst, tokens + (NOW - stamp) * rate / 1e9)
      stamp = NOW
    end
    bucket = {tokens, stamp, rate, topic}
    local whole = math.floor(tokens)
    if whole < room then
      redis.call('HINCRBY', FLOW, 'hr' .. topic, 1)
      room = whole
    end
  end
  if limit > 0 then
    local left = limit - current('x' .. topic) - current('x' .. topic .. ',callback')
    if left < 0 then left = 0 end
    if left < room then
      redis.call('HINCRBY', FLOW, 'hm' .. topic, 1)
      room = left
    end
  end
  return room, bucket
end

-- Takes `n` tokens from `bucket`; jobs left waiting get the next token's wake-up.
local function spend(queue, bucket, n)
  local tokens = bucket[1] - n
  redis.call('HSET', FLOW, 'b' .. bucket[4], cmsgpack.pack({tokens, bucket[2]}))
  if tokens < 1 and has_ready(queue) then
    if tokens < 0 then tokens = 0 end
    set_timer('\0' .. queue, NOW + math.max(1, math.ceil((1 - tokens) * 1e9 / bucket[3])))
  end
end

for t = 4, #ARGV do
  if got >= max then break end
  local topic = ARGV[t]
  local room, bucket = allowance(topic, max - got)
  local stop = got + room
  local before = got
  while got < stop do
    local want = stop - got
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
  if bucket then spend(topic, bucket, got - before) end
end
flush_events()
return out
