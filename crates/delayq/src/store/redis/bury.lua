-- bury: moves a delayed, ready or reserved job to dead, with a new priority if one is given.
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] id, ARGV[4] seq (burial stamp), ARGV[5] priority
-- ('' keeps the job's).
-- Returns {'ok', record} | {'nf'} | {'ws', state code}.
local id = ARGV[3]
local j = load(id)
if not j then return {'nf'} end
if j[S] == 'b' then return {'ws', j[S]} end
unindex(id, j)
if ARGV[5] ~= '' then j[PRIO] = tonumber(ARGV[5]) end
to_dead(j, tonumber(ARGV[4]))
local rec = put(id, j)
flush_events()
return {'ok', rec}
