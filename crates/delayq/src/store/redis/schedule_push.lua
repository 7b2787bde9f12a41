-- schedule_push: stores the jobs of schedules' ticks on one shard, each at most once ever:
-- the shard remembers the latest tick of each schedule it stored (KEYS[10]), and a tick at or
-- before it is passed over, so a push sent again (a retry, or a second instance) creates
-- nothing, even when the tick's job was finished meanwhile. A job whose id exists otherwise is
-- left as it is. One call carries the ticks of many schedules (a tick of many schedules at
-- once), each schedule's in tick order. A job due later than now is placed ahead (lib.lua's
-- header: its tick promotes its group in one step) unless its group was promoted already.
-- KEYS: the shard's keys (lib.lua), then KEYS[10] schedmark HASH schedule id -> the latest tick
--   of that schedule stored on this shard.
-- ARGV[1] channel, ARGV[2] now, then 8 per job: schedule id, id, record (as push's, packed by
--   Rust), queue, run_at, priority, seq, tick.
-- Returns one status per job, in order: 'c' created, 'e' an id that exists, 'd' a tick
-- already stored.
local out = {}
for i = 3, #ARGV, 8 do
  local sid, id, record, tick = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 7])
  local done = tonumber(redis.call('HGET', KEYS[10], sid) or '-1')
  if tick <= done then
    out[#out + 1] = 'd'
  else
    redis.call('HSET', KEYS[10], sid, ARGV[i + 7])
    local run_at = tonumber(ARGV[i + 4])
    local state = 'd'
    if run_at <= NOW then state = 'r' end
    -- What add_index reads of a working record (lib.lua positions S, RUN_AT, PRIO, SEQ, QUEUE).
    local j = {state, false, false, run_at, false, tonumber(ARGV[i + 5]), false, false, false,
      tonumber(ARGV[i + 6]), false, false, false, ARGV[i + 3]}
    -- A job due later is placed ahead (lib.lua): stored p (its state byte, right after the
    -- array header, changed in place), so its tick promotes it with its group's.
    local ahead = state == 'd' and string.byte(record, 2) == 0xa1
      and string.byte(record, 3) == 100 and can_place_ahead(j)
    if ahead then record = string.sub(record, 1, 2) .. 'p' .. string.sub(record, 4) end
    if redis.call('HSETNX', JOBS, id, record) == 1 then
      if ahead then add_ahead(id, j) else add_index(id, j, nil) end
      out[#out + 1] = 'c'
    else
      out[#out + 1] = 'e'
    end
  end
end
flush_events()
return out
