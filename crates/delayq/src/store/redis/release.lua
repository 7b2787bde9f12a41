-- release: a reserved job given back by its consumer goes on by job.rs's
-- after_delivery_failed: dead when out of attempts, else delayed by the release delay or the
-- backoff schedule, else ready now.
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] id, ARGV[4] delay_ms ('' = none, use the backoff),
-- ARGV[5] seq (burial stamp, used if the job dies).
-- Returns {'ok', record} | {'nf'} | {'ws', state code}.
local id = ARGV[3]
local j = load(id)
if not j then return {'nf'} end
if j[S] ~= 'x' then return {'ws', j[S]} end
unindex(id, j)
fail_delivery(j, tonumber(ARGV[4]), tonumber(ARGV[5]))
local rec = put(id, j)
flush_events()
return {'ok', rec}
