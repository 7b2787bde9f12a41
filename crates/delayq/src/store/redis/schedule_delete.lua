-- schedule_delete: removes a recurring schedule (its jobs stay).
-- KEYS: as schedule_put's. ARGV[1] channel, ARGV[2] now, ARGV[3] id.
-- Returns 1 when it was removed, 0 when there was none.
local id = ARGV[3]
if redis.call('HDEL', KEYS[1], id) == 0 then return 0 end
redis.call('HDEL', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
return 1
