-- flow_set: writes a topic's flow control settings on this shard (lib.lua FLOW). On the first
-- shard (`merge`) it applies a change to the settings there and bumps their version; on the
-- others (`put`) it writes the settings the first shard answered, unless it already holds a
-- later version (two changes racing end the same on every shard). Each shard keeps its share
-- of the limits: of n shards, shard i gets floor(x/n) plus one if i < x mod n, at least 1
-- (the rate: x/n). A changed rate starts the shard's bucket full. Announces the topic's
-- queues (a resume or a looser limit lets ready jobs out).
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] topic, ARGV[4] mode: 'merge' or 'put', ARGV[5] the
-- shard's index, ARGV[6] the number of shards, ARGV[7..10] paused, rate (millionths of a
-- hand-out per second), burst, max_in_flight: for 'merge' each '' (unchanged), '-' (removed)
-- or a number; for 'put' each a number (0: none); ARGV[11] the version ('put' only).
-- Returns {version, paused, rate, burst, max_in_flight} (0: none) now in force here.
local topic, mode = ARGV[3], ARGV[4]
local shard, shards = tonumber(ARGV[5]), tonumber(ARGV[6])
local key = 's' .. topic
local raw = redis.call('HGET', FLOW, key)
local old = {0, 0, 0, 0, 0}
if raw then old = cmsgpack.unpack(raw) end
local version = tonumber(redis.call('HGET', FLOW, 'v' .. topic) or '0')
local new = {}
if mode == 'merge' then
  for i = 1, 4 do
    local a = ARGV[6 + i]
    if a == '' then
      new[i] = old[i + 1]
    elseif a == '-' then
      new[i] = 0
    else
      new[i] = tonumber(a)
    end
  end
  if new[2] == 0 then new[3] = 0 end
  local same = true
  for i = 1, 4 do if new[i] ~= old[i + 1] then same = false end end
  if same then return {version, old[2], old[3], old[4], old[5]} end
  version = redis.call('HINCRBY', FLOW, 'v' .. topic, 1)
else
  local v = tonumber(ARGV[11])
  if v <= version then return {version, old[2], old[3], old[4], old[5]} end
  version = v
  redis.call('HSET', FLOW, 'v' .. topic, v)
  for i = 1, 4 do new[i] = tonumber(ARGV[6 + i]) end
end
local function share(x)
  if x <= 0 then return 0 end
  local s = math.floor(x / shards)
  if shard < x % shards then s = s + 1 end
  if s < 1 then s = 1 end
  return s
end
local burst = new[3]
if new[2] > 0 and burst == 0 then
  burst = math.max(1, math.floor(new[2] / 1000000))
end
local rate = 0
if new[2] > 0 then rate = math.max(1, math.floor(new[2] / shards)) end
if new[1] == 0 and new[2] == 0 and new[4] == 0 then
  redis.call('HDEL', FLOW, key, 'b' .. topic)
else
  redis.call('HSET', FLOW, key,
    cmsgpack.pack({version, new[1], new[2], new[3], new[4], rate, share(burst), share(new[4])}))
  if new[2] ~= old[3] or new[3] ~= old[4] then redis.call('HDEL', FLOW, 'b' .. topic) end
end
emit_ready(topic)
emit_ready(topic .. ',callback')
flush_events()
return {version, new[1], new[2], new[3], new[4]}
