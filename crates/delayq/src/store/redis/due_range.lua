-- due_range: the shard's schedule counts of one topic ('' = every topic) for the minutes
-- [ARGV[4], ARGV[5]), in order, from the `dueidx` index and the `due` HASH (read-only).
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now (unused), ARGV[3] topic, ARGV[4] first minute, ARGV[5] end
-- minute (exclusive), ARGV[6] the field to start after ('' = from the first minute),
-- ARGV[7] limit (at most 4000).
-- Returns {field, count, field, count, ...}: at most `limit` minutes (limit: more may follow).
local lo = '[' .. due_field(ARGV[3], tonumber(ARGV[4]))
if ARGV[6] ~= '' then lo = '(' .. ARGV[6] end
local fields = redis.call('ZRANGEBYLEX', DUEIDX, lo, '(' .. due_field(ARGV[3], tonumber(ARGV[5])),
  'LIMIT', 0, tonumber(ARGV[7]))
if #fields == 0 then return {} end
local counts = redis.call('HMGET', DUE, unpack(fields))
local out = {}
for i, f in ipairs(fields) do
  out[#out + 1] = f
  out[#out + 1] = counts[i] or '0'
end
return out
