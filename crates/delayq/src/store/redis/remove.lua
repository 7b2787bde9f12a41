-- remove: deletes jobs in any state with their index entries (finish and delete), in order.
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now (unused), ARGV[3..] pairs: an id and the push stamp (seq) of
-- the job to remove, or '' for whatever job has that id (an early finish names the stamp of
-- the job it was answered for, finishing.rs: a job pushed again since is left alone).
-- Returns one entry per id: the removed job's state code, false when there is no such job (or
-- not with that stamp), or 'k' when its record does not decode (nothing changed; the field
-- stays for inspection). A bad record never fails the call, so ids of unrelated requests
-- batched with it (remove.rs) are unaffected.
local out = {}
for i = 3, #ARGV, 2 do
  local id, seq = ARGV[i], ARGV[i + 1]
  local ok, j = pcall(load, id)
  if not ok then
    out[#out + 1] = 'k'
  elseif not j or (seq ~= '' and j[SEQ] ~= tonumber(seq)) then
    out[#out + 1] = false
  else
    unindex(id, j)
    redis.call('HDEL', JOBS, id)
    out[#out + 1] = j[S]
  end
end
flush_events()
return out
