-- kick: returns one dead job to ready (attempts 0, run_at now).
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] id.
-- Returns {'ok', record} | {'nf'} | {'ws', state code}.
local id = ARGV[3]
local j = load(id)
if not j then return {'nf'} end
if j[S] ~= 'b' then return {'ws', j[S]} end
unindex(id, j)
kick_record(j)
local rec = put(id, j)
flush_events()
return {'ok', rec}
