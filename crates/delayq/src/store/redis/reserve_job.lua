-- reserve_job: reserves one ready or dead job by its id (until now + ttr, attempts + 1),
-- whatever its topic's order and flow control; never a delayed one (never early).
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] id.
-- Returns {'ok', record} | {'nf'} | {'ws', state code}.
local id = ARGV[3]
local j = load(id)
if not j then return {'nf'} end
if j[S] ~= 'r' and j[S] ~= 'b' then return {'ws', j[S]} end
unindex(id, j)
j[S] = 'x'
j[ATT] = j[ATT] + 1
j[RU] = after(NOW, j[TTR])
local rec = put(id, j)
flush_events()
return {'ok', rec}
