-- tick: one timer pass over this shard. First drains the far window lists Rust found due
-- (score - WINDOW_MS <= now, lib.lua): up to `drain` ids in all, each whose record is still
-- delayed with run_at in that window is ZADDed to the timeline at its run_at, any other
-- dropped; a list left empty leaves the window index. Then takes up to `limit` timeline
-- entries due at `now`: a delayed job becomes ready; a group of jobs placed ahead (lib.lua)
-- becomes ready in one step; a reserved job whose TTR ran out goes on by job.rs's
-- after_delivery_failed (ready now, delayed by its backoff, or dead). The record,
-- not the score, decides: an entry whose record is gone or not timed is dropped; one whose
-- record has a later deadline is re-scored. Nothing here can make the pass spin on one entry.
-- KEYS: the shard's keys (lib.lua), then KEYS[10..9+m] the due window lists, earliest first.
-- ARGV[1] channel, ARGV[2] now, ARGV[3] limit, ARGV[4] seq (burial stamp for jobs that die),
-- ARGV[5] drain (most ids taken from window lists), ARGV[6] the calling instance's origin id
-- (its event is marked with it, lib.lua), ARGV[7] window_floor (ms; 0 = none): no window
-- drain time is reported before it (Rust passes the time a refused drain is retried, so the
-- timer does not spin on a window it cannot drain), ARGV[8..7+m] the window numbers of
-- KEYS[10..9+m].
-- Returns {promoted, expired, next_due, topic, topic, ...}: next_due is the shard's earliest
-- remaining timer deadline or window drain time (not before window_floor), `now` if work due
-- now remains (limit or drain budget hit), -1 if none; the topics are those that gained ready
-- jobs.
local limit = tonumber(ARGV[3])
local seq = tonumber(ARGV[4])
local drain = tonumber(ARGV[5])
ev_origin = ARGV[6]
local window_floor = tonumber(ARGV[7])
for k = 10, #KEYS do
  if drain <= 0 then break end
  local list, w = KEYS[k], ARGV[k - 2]
  local n = tonumber(w)
  local ids = redis.call('LPOP', list, drain)
  if ids then
    drain = drain - #ids
    for _, id in ipairs(ids) do
      local j = load_lenient(id)
      if j and j[S] == 'd' and window_of(j[RUN_AT]) == n then
        redis.call('ZADD', TIMELINE, num(j[RUN_AT]), id)
      end
    end
  end
  if redis.call('EXISTS', list) == 0 then redis.call('ZREM', WINDOWS, w) end
end
local promoted, expired = 0, 0
local due = redis.call('ZRANGEBYSCORE', TIMELINE, '-inf', num(NOW), 'LIMIT', '0', num(limit))
-- Every due entry leaves the timeline at once (one ZREM per 500); an entry whose record has a
-- later deadline, or whose job stays timed, is added back below. The records are read with
-- one HMGET and written with one HSET per 500.
local ids, groups = {}, {}
for _, id in ipairs(due) do
  local b = string.byte(id, 1)
  if b == 0 then
    emit_ready(string.sub(id, 2))
  elseif b == 1 then
    groups[#groups + 1] = id
  else
    ids[#ids + 1] = id
  end
end
-- A group of jobs placed ahead (lib.lua) is promoted in one step, however many it holds.
for _, g in ipairs(groups) do promoted = promoted + fire_group(g) end
if #due > 0 then call_chunked('ZREM', TIMELINE, due) end
local raws = {}
if #ids > 0 then raws = call_chunked('HMGET', JOBS, ids) end
local writes = {}
-- Promotions of a run of jobs of one queue due in one minute are counted once for the run.
local run_queue, run_topic, run_minute, run_n = nil, nil, nil, 0
local function end_run()
  if run_n > 0 then
    count(run_queue, 'd', -run_n)
    count(run_queue, 'r', run_n)
    count_due_in(run_topic, run_minute, -run_n)
    emit_ready(run_queue)
    promoted = promoted + run_n
    run_n = 0
  end
end
for i, id in ipairs(ids) do
  local raw = raws[i]
  -- A delayed record in the stored layout (its state the fixstr 'd' right after the array
  -- header) is promoted without a working record (`r`): its state byte becomes 'r' in place,
  -- which is what `encode` would write, and its ready entry is built from the stored fields.
  -- Any other record is decoded (`j`).
  local r, j = nil, nil
  if raw and string.byte(raw, 3) == 100 and string.byte(raw, 2) == 0xa1 then
    r = unpack_stored(raw, 'd')
  end
  local deadline = nil
  if r then
    deadline = r[4]
  else
    j = decode_lenient(raw)
    if j and j[S] == 'd' then
      deadline = j[RUN_AT]
    elseif j and j[S] == 'x' then
      deadline = j[RU]
    end
  end
  if deadline == nil then
    -- Not timed (gone, or not delayed or reserved): its entry stays out.
  elseif deadline > NOW then
    add_timeline[#add_timeline + 1] = num(deadline)
    add_timeline[#add_timeline + 1] = id
  elseif r then
    local queue = stored_queue(r)
    local minute = math.floor(deadline / WINDOW_MS)
    if queue ~= run_queue or minute ~= run_minute then
      end_run()
      run_queue, run_topic, run_minute = queue, r[2], minute
    end
    run_n = run_n + 1
    add_ready[#add_ready + 1] = '0'
    add_ready[#add_ready + 1] = ready_member_of(queue, r[7] or DEFAULT_PRIO, deadline, r[5], id)
    writes[#writes + 1] = id
    writes[#writes + 1] = string.sub(raw, 1, 2) .. 'r' .. string.sub(raw, 4)
  else
    unindex(id, j, true)
    if j[S] == 'd' then
      j[S] = 'r'
      promoted = promoted + 1
    else
      fail_delivery(j, nil, seq)
      expired = expired + 1
    end
    add_index(id, j)
    writes[#writes + 1] = id
    writes[#writes + 1] = encode(j)
  end
end
end_run()
if #writes > 0 then call_chunked('HSET', JOBS, writes) end
-- The earliest remaining deadline, or NOW when something is still due (the batch limit).
local next_due = -1
local t = timeline_head()
local w = with_windows(nil)
if w and w < window_floor then w = window_floor end
if w and (t == nil or w < t) then t = w end
if t then
  if t < NOW then t = NOW end
  next_due = t
end
flush_events()
local out = {promoted, expired, next_due}
for _, topic in ipairs(ev_ready) do out[#out + 1] = topic end
return out
