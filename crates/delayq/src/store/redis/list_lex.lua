-- list_lex: one page of a queue's ready or dead jobs, in the zset's order (read-only).
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now (unused), ARGV[3] 'r' (the ready zset) or 'b' (dead),
-- ARGV[4] queue, ARGV[5] the member to start after ('' = the queue's first; Rust builds it,
-- keys.rs ready_member / dead_member), ARGV[6] limit.
-- Returns {n, id, record, id, record, ...}: n the entries read (n = limit: more may follow);
-- an entry whose record is gone is skipped, and so is a job placed ahead whose group waits
-- (delayed: list_delayed lists it).
local zset, at = READY, ready_id_at(ARGV[4])
if ARGV[3] == 'b' then zset, at = DEAD, dead_id_at(ARGV[4]) end
local lo = topic_min(ARGV[4])
if ARGV[5] ~= '' then lo = '(' .. ARGV[5] end
local members = redis.call('ZRANGEBYLEX', zset, lo, topic_max(ARGV[4]), 'LIMIT', 0,
  tonumber(ARGV[6]))
local out = {#members}
for _, m in ipairs(members) do
  local id = string.sub(m, at)
  local raw = redis.call('HGET', JOBS, id)
  if raw and zset == READY and string.byte(raw, 3) == 112 and string.byte(raw, 2) == 0xa1 then
    -- Placed ahead (lib.lua): listed once its group is promoted, as the ready job it is then.
    if group_waits((member_group(m, at))) then
      raw = nil
    else
      raw = string.sub(raw, 1, 2) .. 'r' .. string.sub(raw, 4)
    end
  end
  if raw then
    out[#out + 1] = id
    out[#out + 1] = raw
  end
end
return out
