-- schedule_put: creates or replaces a recurring schedule (schedules.rs), unconditionally or
-- only while it is at an expected version; a fire is a put at the version it was planned from.
-- KEYS[1] sched HASH id -> record (Rust's, opaque here), KEYS[2] schedver HASH id -> version,
--   KEYS[3] schednext ZSET id scored by its next tick (only schedules not paused with one),
--   KEYS[4] schedids ZSET of every id, all scores 0 (the listing, in byte order).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] id, ARGV[4] record, ARGV[5] expected version ('' for
--   any, '0' for none: a restore's insert-if-absent), ARGV[6] next tick ('' when the schedule is not due ever: paused or none left).
-- Returns {'ok', new version} (one more than the replaced one's, 1 when created), {'nf'} when
-- a version was expected and there is no schedule, {'ex'} when it is at another version (or
-- exists, when '0' was expected).
local id, rec, expect, nxt = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local cur = redis.call('HGET', KEYS[2], id)
if expect == '0' then
  if cur then return {'ex'} end
elseif expect ~= '' then
  if not cur then return {'nf'} end
  if cur ~= expect then return {'ex'} end
end
local v = (tonumber(cur) or 0) + 1
redis.call('HSET', KEYS[1], id, rec)
redis.call('HSET', KEYS[2], id, v)
if nxt == '' then
  redis.call('ZREM', KEYS[3], id)
else
  redis.call('ZADD', KEYS[3], nxt, id)
end
redis.call('ZADD', KEYS[4], 0, id)
return {'ok', v}
