-- push: stores new jobs of one shard, each created or (replace mode) atomically replacing the
-- job with its id, whatever that job's state. A replaced job's index entries go with it, so
-- its old version can never be delivered again (an id it left in a window list is dropped by
-- the drain: the record no longer matches).
-- KEYS: the shard's keys (lib.lua), then KEYS[10..9+m] the window lists far jobs go to.
-- ARGV[1] channel, ARGV[2] now, ARGV[3] mode: 'reject' or 'replace', ARGV[4] m, ARGV[5..4+m]
--   the window numbers of KEYS[10..9+m];
--   then 7 per job: id, record, queue (lib.lua), run_at, priority, seq, window (0 = the timeline, k =
--   KEYS[9+k]). The record is the new job's, already packed by Rust (record.rs `encode_new`,
--   which writes exactly what lib.lua's `encode` would): 'r' when run_at <= now, else 'd'.
--   Rust packs it so this function needs no table, number parsing or pack per job; the
--   fields the indexes need come beside it unpacked.
-- Returns one status per job, in order: 'c' created, 'e' exists (reject mode; nothing
-- changed), 'k' (replace mode) the existing record does not decode (nothing changed; a bad
-- record never fails the call, so jobs of unrelated requests batched with it, push.rs, are
-- unaffected), or the replaced job's prior state code.
local reject = ARGV[3] == 'reject'
local m = tonumber(ARGV[4])
local out = {}
for i = 5 + m, #ARGV, 7 do
  local id, record = ARGV[i], ARGV[i + 1]
  local run_at = tonumber(ARGV[i + 3])
  local state = 'd'
  if run_at <= NOW then state = 'r' end
  local k = tonumber(ARGV[i + 6])
  local win = nil
  if k > 0 then win = {KEYS[9 + k], ARGV[4 + k]} end
  -- What add_index reads of a working record (lib.lua positions S, RUN_AT, PRIO, SEQ, QUEUE).
  local j = {state, false, false, run_at, false, tonumber(ARGV[i + 4]), false, false, false,
    tonumber(ARGV[i + 5]), false, false, false, ARGV[i + 2]}
  if reject then
    -- One command decides and writes: HSETNX refuses an existing id, whatever its record.
    if redis.call('HSETNX', JOBS, id, record) == 1 then
      add_index(id, j, win)
      out[#out + 1] = 'c'
    else
      out[#out + 1] = 'e'
    end
  elseif redis.call('HSETNX', JOBS, id, record) == 1 then
    -- A new id (the common case): written without reading first.
    add_index(id, j, win)
    out[#out + 1] = 'c'
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
      add_index(id, j, win)
      redis.call('HSET', JOBS, id, record)
    end
  end
end
flush_events()
return out
