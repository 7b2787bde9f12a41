-- remove: deletes a job in any state with its index entries (finish and delete).
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now (unused), ARGV[3] id.
-- Returns the removed job's state code, or nil when there is no such job.
local id = ARGV[3]
local j = load(id)
if not j then return false end
unindex(id, j)
redis.call('HDEL', JOBS, id)
return j[S]
