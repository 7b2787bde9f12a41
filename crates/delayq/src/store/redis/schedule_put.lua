-- schedule_put: creates or replaces recurring schedules (schedules.rs), each unconditionally
-- or only while it is at an expected version; a fire is a put at the version it was planned
-- from. One call carries one schedule (a change) or many of one shard (the claims of a tick of
-- many schedules), each its own compare-and-set.
-- KEYS[1] sched HASH id -> record (Rust's, opaque here), KEYS[2] schedver HASH id -> version,
--   KEYS[3] schednext ZSET id scored by its next tick (only schedules not paused with one),
--   KEYS[4] schedids ZSET of every id, all scores 0 (the listing, in byte order).
-- ARGV[1] channel, ARGV[2] now, then 4 per schedule: id, record, expected version ('' for
--   any, '0' for none: a restore's insert-if-absent), next tick ('' when the schedule is not
--   due ever: paused or none left).
-- Returns one reply per schedule, in order: {'ok', new version} (one more than the replaced
-- one's, 1 when created), {'nf'} when a version was expected and there is no schedule, {'ex'}
-- when it is at another version (or exists, when '0' was expected).
local out = {}
for i = 3, #ARGV, 4 do
  local id, rec, expect, nxt = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local cur = redis.call('HGET', KEYS[2], id)
  local refused
  if expect == '0' then
    if cur then refused = 'ex' end
  elseif expect ~= '' then
    if not cur then
      refused = 'nf'
    elseif cur ~= expect then
      refused = 'ex'
    end
  end
  if refused then
    out[#out + 1] = {refused}
  else
    local v = (tonumber(cur) or 0) + 1
    redis.call('HSET', KEYS[1], id, rec)
    redis.call('HSET', KEYS[2], id, v)
    if nxt == '' then
      redis.call('ZREM', KEYS[3], id)
    else
      redis.call('ZADD', KEYS[3], nxt, id)
    end
    redis.call('ZADD', KEYS[4], 0, id)
    out[#out + 1] = {'ok', v}
  end
end
return out
