-- reschedule: changes the due time (and optionally body and priority) of a delayed or ready
-- job; it is ready if the new due time is not after now, else delayed (in window list
-- KEYS[10] when Rust found the new due time far, lib.lua). Keeps id and seq.
-- KEYS: the shard's keys (lib.lua), KEYS[10] the new due time's window list when far.
-- ARGV[1] channel, ARGV[2] now, ARGV[3] id, ARGV[4] run_at, ARGV[5] '1' to set the body
-- (then ARGV[6] is it), ARGV[7] priority ('' = keep), ARGV[8] the window number of KEYS[10]
-- ('' = not far: the timeline).
-- Returns {'ok', record, previous state code} | {'nf'} | {'ws', state code}.
local id = ARGV[3]
local j = load(id)
if not j then return {'nf'} end
local previous = j[S]
if previous ~= 'd' and previous ~= 'r' then return {'ws', previous} end
unindex(id, j)
j[RUN_AT] = tonumber(ARGV[4])
if ARGV[5] == '1' then j[BODY] = ARGV[6] end
if ARGV[7] ~= '' then j[PRIO] = tonumber(ARGV[7]) end
if j[RUN_AT] <= NOW then j[S] = 'r' else j[S] = 'd' end
local win = nil
if ARGV[8] ~= '' then win = {KEYS[10], ARGV[8]} end
local rec = put(id, j, win)
flush_events()
return {'ok', rec, previous}
