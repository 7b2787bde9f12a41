-- tick: one timer pass over this shard. Takes up to `limit` timeline entries due at `now`:
-- a delayed job becomes ready; a reserved job whose TTR ran out goes on by job.rs's
-- after_delivery_failed (ready now, delayed by its backoff, or dead). The record, not the
-- score, decides: an entry whose record is gone or not timed is dropped; one whose record has
-- a later deadline is re-scored. Nothing here can make the pass spin on one entry.
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] limit, ARGV[4] seq (burial stamp for jobs that die).
-- Returns {promoted, expired, next_due, topic, topic, ...}: next_due is the shard's earliest
-- remaining deadline, `now` if due entries remain (limit hit), -1 if none; the topics are
-- those that gained ready jobs.
local limit = tonumber(ARGV[3])
local seq = tonumber(ARGV[4])
local promoted, expired = 0, 0
local due = redis.call('ZRANGEBYSCORE', TIMELINE, '-inf', NOW, 'LIMIT', 0, limit)
for _, id in ipairs(due) do
  local j = load_lenient(id)
  local deadline = nil
  if j and j[S] == 'd' then
    deadline = j[RUN_AT]
  elseif j and j[S] == 'x' then
    deadline = j[RU]
  end
  if deadline == nil then
    redis.call('ZREM', TIMELINE, id)
  elseif deadline > NOW then
    redis.call('ZADD', TIMELINE, deadline, id)
  elseif j[S] == 'd' then
    unindex(id, j)
    j[S] = 'r'
    put(id, j)
    promoted = promoted + 1
  else
    unindex(id, j)
    fail_delivery(j, nil, seq)
    put(id, j)
    expired = expired + 1
  end
end
local next_due = -1
if #redis.call('ZRANGEBYSCORE', TIMELINE, '-inf', NOW, 'LIMIT', 0, 1) > 0 then
  next_due = NOW
else
  local head = redis.call('ZRANGE', TIMELINE, 0, 0, 'WITHSCORES')
  if head[1] then next_due = tonumber(head[2]) end
end
flush_events()
local out = {promoted, expired, next_due}
for _, topic in ipairs(ev_ready) do out[#out + 1] = topic end
return out
