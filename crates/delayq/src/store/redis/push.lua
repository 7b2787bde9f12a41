-- push: stores new jobs of one shard, each created or (replace mode) atomically replacing the
-- job with its id, whatever that job's state. A replaced job's index entries go with it, so
-- its old version can never be delivered again.
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3] mode: 'reject' or 'replace';
--   then 9 per job: id, topic, body, run_at, ttr_ms, priority, max_attempts, seq,
--   backoff ('' or '15000,180000').
-- Returns one status per job, in order: 'c' created, 'e' exists (nothing changed), or the
-- replaced job's prior state code.
local reject = ARGV[3] == 'reject'
local out = {}
for i = 4, #ARGV, 9 do
  local id = ARGV[i]
  local old = load(id)
  if old and reject then
    out[#out + 1] = 'e'
  else
    if old then
      unindex(id, old)
      out[#out + 1] = old[S]
    else
      out[#out + 1] = 'c'
    end
    local backoff = {}
    for step in string.gmatch(ARGV[i + 8], '%d+') do backoff[#backoff + 1] = tonumber(step) end
    local run_at = tonumber(ARGV[i + 3])
    local state = 'd'
    if run_at <= NOW then state = 'r' end
    put(id, {state, ARGV[i + 1], ARGV[i + 2], run_at, tonumber(ARGV[i + 4]),
      tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]), 0, 0, tonumber(ARGV[i + 7]), backoff})
  end
end
flush_events()
return out
