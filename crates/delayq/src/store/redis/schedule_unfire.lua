-- schedule_unfire: withdraws the job of a schedule's tick fired ahead, before a change of the
-- schedule (pause, replace, delete) that does not keep the tick (schedules.rs): the job is
-- removed only while it still waits for its tick (delayed, due at the tick, never handed out),
-- and the shard's mark of the schedule (schedule_push.lua) goes back before the tick, so that
-- the tick may be stored again (fired again from the changed schedule).
-- KEYS: the shard's keys (lib.lua), then KEYS[10] schedmark (schedule_push.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] schedule id, ARGV[4] the tick's job id, ARGV[5] tick.
-- Returns 1 when the job was withdrawn, 0 when there was none waiting.
local sid, id, tick = ARGV[3], ARGV[4], tonumber(ARGV[5])
local ok, j = pcall(load, id)
if not ok or not j then return 0 end
if j[S] ~= 'd' or j[RUN_AT] ~= tick or j[ATT] ~= 0 then return 0 end
unindex(id, j)
redis.call('HDEL', JOBS, id)
if tonumber(redis.call('HGET', KEYS[10], sid) or '-1') == tick then
  redis.call('HSET', KEYS[10], sid, num(tick - 1))
end
flush_events()
return 1
