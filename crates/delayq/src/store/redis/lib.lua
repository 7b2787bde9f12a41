-- lib: helpers shared by the transition scripts. Not a script by itself: Rust prepends it to
-- each transition's file (scripts.rs), so every script sees the same record format and index
-- maintenance. Everything it touches is passed in KEYS; all five keys share one {hash tag}.
--
-- KEYS (every script that includes lib):
--   KEYS[1] jobs      HASH  id -> cmsgpack record (below)
--   KEYS[2] timeline  ZSET  id scored by its timer deadline: run_at (delayed), reserved_until
--                           (reserved). One zset for both, so the timer reads one head.
--   KEYS[3] ready     ZSET  all scores 0; member = topic \0 priority(4) run_at(6) seq(7) id,
--                           integers big-endian, so lexicographic order is (topic, priority,
--                           run_at, seq) and ZRANGEBYLEX [topic\0 (topic\1 is one topic's queue.
--                           Topics contain no control characters, so \0 ends a topic.
--   KEYS[4] dead      ZSET  all scores 0; member = topic \0 seq(7) id (seq is re-stamped on
--                           burial, so this is oldest burial first per topic).
--   KEYS[5] counts    HASH  state code .. topic -> count of the shard's jobs; HDEL at zero.
-- ARGV (every script that includes lib): ARGV[1] pub/sub channel, ARGV[2] now (ms).
--
-- Record: a cmsgpack array
--   {state, topic, body, run_at, ttr_ms, priority, max_attempts, attempts, reserved_until
--    (0 = none), seq, backoff_ms (array)}
-- state is job.rs's JobState::code: d delayed, r ready, x reserved, b dead (buried).
-- Every number is an integer below 2^53, exact in Lua's doubles; cmsgpack packs them as ints.
--
-- Events: one PUBLISH per script run, at most; payload = lines "R<topic>" (jobs of the topic
-- became ready) and "D<ms>" (a timer deadline became its shard's earliest).

local JOBS, TIMELINE, READY, DEAD, COUNTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local CHANNEL = ARGV[1]
local NOW = tonumber(ARGV[2])
-- job.rs MAX_RUN_AT: `after` clamps here.
local MAX_RUN_AT = 253402300799000

local S, TOPIC, BODY, RUN_AT, TTR, PRIO, MAXATT, ATT, RU, SEQ, BACKOFF = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11

-- job.rs `after`: a delay added to a time, clamped at MAX_RUN_AT.
local function after(t, d)
  local r = t + d
  if r > MAX_RUN_AT then r = MAX_RUN_AT end
  return r
end

-- A job's record, or nil. A record that does not decode raises a script error (the caller
-- gets StoreError::Corrupt naming it).
local function load(id)
  local raw = redis.call('HGET', JOBS, id)
  if not raw then return nil end
  return cmsgpack.unpack(raw)
end

-- Like `load`, but a record that does not decode counts as absent. For scans over indexes
-- (reserve, tick, kick_topic): one foreign value must not fail every pass, nor make the
-- timer spin on it. Its index entry is then dropped; the field stays for inspection.
local function load_lenient(id)
  local raw = redis.call('HGET', JOBS, id)
  if not raw then return nil end
  local ok, j = pcall(cmsgpack.unpack, raw)
  if not ok or type(j) ~= 'table' or type(j[S]) ~= 'string' or type(j[TOPIC]) ~= 'string' then
    return nil
  end
  return j
end

local function ready_member(id, j)
  return j[TOPIC] .. '\0' .. struct.pack('>I4I6I7', j[PRIO], j[RUN_AT], j[SEQ]) .. id
end

local function dead_member(id, j)
  return j[TOPIC] .. '\0' .. struct.pack('>I7', j[SEQ]) .. id
end

-- Where the id starts in a ready / dead member of `topic`.
local function ready_id_at(topic) return #topic + 19 end
local function dead_id_at(topic) return #topic + 9 end

-- ZRANGEBYLEX bounds of one topic's entries in the ready or dead zset.
local function topic_min(topic) return '[' .. topic .. '\0' end
local function topic_max(topic) return '(' .. topic .. '\1' end

local function count(topic, state, delta)
  local f = state .. topic
  if redis.call('HINCRBY', COUNTS, f, delta) <= 0 then
    redis.call('HDEL', COUNTS, f)
  end
end

local ev_seen, ev_ready, ev_due = {}, {}, nil

local function emit_ready(topic)
  if not ev_seen[topic] then
    ev_seen[topic] = true
    ev_ready[#ev_ready + 1] = topic
  end
end

local function flush_events()
  local lines = {}
  for i, topic in ipairs(ev_ready) do lines[i] = 'R' .. topic end
  if ev_due then lines[#lines + 1] = 'D' .. string.format('%d', ev_due) end
  if #lines > 0 then
    redis.call('PUBLISH', CHANNEL, table.concat(lines, '\n'))
  end
end

-- Sets a timer deadline for `id` (not in the timeline now); a deadline before the shard's
-- current head is announced, so timers sleeping until a later time wake up.
local function set_timer(id, t)
  local head = redis.call('ZRANGE', TIMELINE, 0, 0, 'WITHSCORES')
  if head[1] == nil or t < tonumber(head[2]) then
    if ev_due == nil or t < ev_due then ev_due = t end
  end
  redis.call('ZADD', TIMELINE, t, id)
end

-- Removes a job's index entries and count (not its record).
local function unindex(id, j)
  local s = j[S]
  if s == 'd' or s == 'x' then
    redis.call('ZREM', TIMELINE, id)
  elseif s == 'r' then
    redis.call('ZREM', READY, ready_member(id, j))
  else
    redis.call('ZREM', DEAD, dead_member(id, j))
  end
  count(j[TOPIC], s, -1)
end

-- Stores a job (new or changed, already unindexed) with its index entries and count.
-- Returns the packed record.
local function put(id, j)
  local s = j[S]
  if s == 'd' then
    set_timer(id, j[RUN_AT])
  elseif s == 'x' then
    set_timer(id, j[RU])
  elseif s == 'r' then
    redis.call('ZADD', READY, 0, ready_member(id, j))
    emit_ready(j[TOPIC])
  else
    redis.call('ZADD', DEAD, 0, dead_member(id, j))
  end
  count(j[TOPIC], s, 1)
  local packed = cmsgpack.pack(j)
  redis.call('HSET', JOBS, id, packed)
  return packed
end

local function to_dead(j, seq)
  j[S] = 'b'
  j[RU] = 0
  j[SEQ] = seq
end

-- job.rs `backoff_delay`.
local function backoff_delay(backoff, attempts)
  local n = #backoff
  if n == 0 or attempts == 0 then return 0 end
  if attempts > n then attempts = n end
  return backoff[attempts]
end

-- job.rs `after_delivery_failed`, applied to a reserved record taken out of its indexes.
-- `delay` is the release delay (nil: none); `seq` stamps a burial.
local function fail_delivery(j, delay, seq)
  if j[MAXATT] > 0 and j[ATT] >= j[MAXATT] then
    to_dead(j, seq)
    return
  end
  if delay == nil then delay = backoff_delay(j[BACKOFF], j[ATT]) end
  j[RU] = 0
  if delay == 0 then
    j[S] = 'r'
    j[RUN_AT] = NOW
  else
    j[S] = 'd'
    j[RUN_AT] = after(NOW, delay)
  end
end

-- A dead record back to ready, attempts reset, due now (job.rs kick rules).
local function kick_record(j)
  j[S] = 'r'
  j[ATT] = 0
  j[RUN_AT] = NOW
end
