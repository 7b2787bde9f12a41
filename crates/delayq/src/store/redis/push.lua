-- push: stores new jobs of one shard, each created or (replace mode) atomically replacing the
-- job with its id, whatever that job's state. A replaced job's index entries go with it, so
-- its old version can never be delivered again (an id it left in a window list is dropped by
-- the drain: the record no longer matches).
-- KEYS: the shard's keys (lib.lua), then KEYS[7..6+m] the window lists far jobs go to.
-- ARGV[1] channel, ARGV[2] now, ARGV[3] mode: 'reject' or 'replace', ARGV[4] m, ARGV[5..4+m]
--   the window numbers of KEYS[7..6+m];
--   then 10 per job: id, topic, body, run_at, ttr_ms, priority, max_attempts, seq,
--   backoff ('' or '15000,180000'), window (0 = the timeline, k = KEYS[6+k]).
-- Returns one status per job, in order: 'c' created, 'e' exists (reject mode; nothing
-- changed), 'k' (replace mode) the existing record does not decode (nothing changed; a bad
-- record never fails the call, so jobs of unrelated requests batched with it, mod.rs, are
-- unaffected), or the replaced job's prior state code.
local reject = ARGV[3] == 'reject'
local m = tonumber(ARGV[4])
local out = {}
for i = 5 + m, #ARGV, 10 do
  local id = ARGV[i]
  local backoff = {}
  for step in string.gmatch(ARGV[i + 8], '%d+') do backoff[#backoff + 1] = tonumber(step) end
  local run_at = tonumber(ARGV[i + 3])
  local state = 'd'
  if run_at <= NOW then state = 'r' end
  local k = tonumber(ARGV[i + 9])
  local win = nil
  if k > 0 then win = {KEYS[6 + k], ARGV[4 + k]} end
  local j = {state, ARGV[i + 1], ARGV[i + 2], run_at, tonumber(ARGV[i + 4]),
    tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]), 0, 0, tonumber(ARGV[i + 7]), backoff}
  if reject then
    -- One command decides and writes: HSETNX refuses an existing id, whatever its record.
    if redis.call('HSETNX', JOBS, id, encode(j)) == 1 then
      add_index(id, j, win)
      out[#out + 1] = 'c'
    else
      out[#out + 1] = 'e'
    end
  else
    local ok, old = pcall(load, id)
    if not ok then
      out[#out + 1] = 'k'
    else
      if old then
        unindex(id, old)
        out[#out + 1] = old[S]
      else
        out[#out + 1] = 'c'
      end
      put(id, j, win)
    end
  end
end
flush_events()
return out
