-- lib: helpers shared by the transitions, the top of delayq's Redis function library.
-- scripts.rs builds the library: this file, then each transition's file (`<name>.lua`) as the
-- body of one registered function (`redis.register_function`), so every transition sees the
-- same record format and index maintenance. Redis runs this top level once, when the library
-- is loaded (FUNCTION LOAD), not on every call as it would for a script: a call pays for its
-- own work only.
-- Everything a call touches is passed in its keys; all keys share one {hash tag}.
--
-- Per-call state lives in upvalues that `begin` (at the end of this file) resets at the start
-- of every call: the call's KEYS and ARGV, the names below taken from them, and the pending
-- index, count and event changes. Redis runs one call at a time, so no call sees another's.
--
-- KEYS (every transition):
--   KEYS[1] jobs      HASH  id -> cmsgpack record (below)
--   KEYS[2] timeline  ZSET  id scored by its exact timer deadline: run_at (delayed),
--                           reserved_until (reserved). One zset for both, so the timer reads
--                           one head. Holds every delayed job except the far ones below.
--   KEYS[3] ready     ZSET  all scores 0; member = topic \0 priority(4) run_at(6) seq(7) id,
--                           integers big-endian, so lexicographic order is (topic, priority,
--                           run_at, seq) and ZRANGEBYLEX [topic\0 (topic\1 is one topic's queue.
--                           Topics contain no control characters, so \0 ends a topic.
--   KEYS[4] dead      ZSET  all scores 0; member = topic \0 seq(7) id (seq is re-stamped on
--                           burial, so this is oldest burial first per topic).
--   KEYS[5] counts    HASH  state code .. topic -> count of the shard's jobs; HDEL at zero.
--   KEYS[6] windows   ZSET  member = window number n (a decimal string), score = the earliest
--                           run_at ever pushed into list n (ZADD LT): a lower bound of its jobs'.
--   KEYS[7] due       HASH  topic \0 minute(5) -> count of the shard's delayed jobs (pull and
--                           callback) of the topic due in that minute (floor(run_at / 60000),
--                           big-endian); topic '' (the field starts with \0) counts every
--                           topic's. HDEL at zero. Per (topic, minute) with jobs, not per job.
--   KEYS[8] dueidx    ZSET  the fields of `due`, all scores 0: ZRANGEBYLEX finds a topic's
--                           minutes with delayed jobs in order (the schedule, the delayed
--                           listing).
--   KEYS[9] flow      HASH  flow control (keys.rs): `s<topic>` the topic's settings, cmsgpack
--                           {version, paused (0/1), rate (millionths/s, 0 none), burst (0
--                           default), max_in_flight (0 none), and this shard's share: rate,
--                           burst, max_in_flight}; `v<topic>` the settings' version; `b<topic>`
--                           the shard's token bucket {tokens, stamp}; `hp`, `hr`, `hm<topic>`
--                           hand-outs held back by pause, rate, max_in_flight.
--   KEYS[10..] (push, reschedule, tick only) window lists `<tag>:w:<n>`, named by Rust.
-- ARGV (every transition): ARGV[1] pub/sub channel, ARGV[2] now (ms).
--
-- Far-future jobs (memory: a list entry costs about the id's length + 2 bytes, a timeline
-- entry several times more). A push or reschedule whose run_at lies in window
-- n = floor(run_at / WINDOW_MS) with n >= window(now) + 2 (Rust decides, keys.rs far_window,
-- and passes list n in KEYS) RPUSHes the id to list n instead of the timeline. Every other deadline (near pushes,
-- backoff, release delays, reservations) goes to the timeline. Lists are cleaned lazily:
-- delete, replace, reschedule, bury leave the id in its list. The timer drains a window once
-- its score is within WINDOW_MS of now (tick.lua): each id whose record is still delayed with
-- run_at in that window is ZADDed to the timeline at its run_at (idempotent, so duplicates
-- and two instances draining at once are harmless; promotion stays the timeline's exact,
-- atomic step), anything else is dropped. Invariant: list n exists iff n is in `windows`
-- (every script that adds or empties a list updates both).
--
-- Record: a cmsgpack array, trailing defaults omitted (a pending job with default options is
-- 5 elements, ~59 bytes with a 30-byte body: jemalloc's 64-byte class):
--   {state, topic, body, run_at, seq, ttr_ms = 60000, priority = 1024, max_attempts = 0,
--    backoff_ms (array) = {}, attempts = 0, reserved_until (0 = none) = 0}
-- then, for a callback job only (all 13 elements then present): callback_url,
-- callback_timeout_ms; for a publish job (14 elements): "", 0, publish (job.rs Publish::pack,
-- opaque here). A callback or publish job's ready and dead index entries and counts are under its
-- topic's callback queue, `<topic>,callback` (job.rs Topic::callback_queue), not its topic:
-- indexes and events name queues (`queue` in a working record), and a topic, which has no
-- comma, never names a callback queue.
-- The defaults are the storage format's (record.rs mirrors them), not job.rs's: never change
-- them. Records in the 11-element layout ({state, topic, body, run_at, ttr_ms, priority,
-- max_attempts, attempts, reserved_until, seq, backoff_ms}: always 11 elements, the 11th an
-- array; a record of 11 in the layout above ends with a number) are read too, and rewritten
-- in the layout above by their next transition.
-- state is record.rs's state_code: d delayed, r ready, x reserved, b dead (buried), or p
-- (placed ahead, below), which only the scripts and record.rs resolve.
--
-- Jobs placed ahead (format version 2): schedule_push stores a tick's job fired ahead (due
-- later than now) as state p, with its ready entry already in `ready` and no timeline entry.
-- Its group is (queue, priority, run_at): G = \1 queue \0 priority(4) run_at(6) (`group_of`;
-- no id starts with a control character). While the group waits, the timeline holds G scored
-- by run_at and `due` holds the field G: how many of its jobs are counted delayed (in
-- `counts` and in `due`'s minute counts like any delayed job). Its tick (tick.lua, or a
-- reserve that meets the group once it is due: `fire_group`) removes both and moves that
-- count from delayed to ready at once, so promoting a group costs one step, not one per job.
-- A p record is delayed while its group's field exists and ready after (`decode`: the
-- working record says d or r, PRE marks it); reserve skips a waiting group's entries
-- (reserve.lua), the listings show p records by that state, and every transition that takes
-- a p job out (`unindex`) removes its ready entry and, while it waits, its group's count.
-- Every number is an integer below 2^53, exact in Lua's doubles; cmsgpack packs them as ints.
--
-- Events: one PUBLISH per call, at most; payload = lines "R<topic>" (jobs of the topic
-- became ready) and "D<ms>" (a timer deadline, or a window's drain time, became its shard's
-- earliest), after a first line "O<origin>" when the run names its instance (tick does: that
-- instance acts on the script's reply at once and skips its own echo; events.rs). Readers
-- ignore lines they do not know.

-- Set by `begin` for each call (see the top).
local KEYS, ARGV
local JOBS, TIMELINE, READY, DEAD, COUNTS, WINDOWS, DUE, DUEIDX, FLOW, CHANNEL, NOW
-- job.rs MAX_RUN_AT: `after` clamps here.
local MAX_RUN_AT = 253402300799000
-- keys.rs WINDOW_MS.
local WINDOW_MS = 60000

-- Positions in a loaded (working) record; `decode` and `encode` map the stored layout.
local S, TOPIC, BODY, RUN_AT, TTR, PRIO, MAXATT, ATT, RU, SEQ, BACKOFF = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
-- Working-only positions: a callback job's URL and timeout (nil for a pull job; "" and 0 for a
-- publish job), the queue its ready and dead entries and counts are under, and a publish job's
-- target (nil for others).
local CB_URL, CB_TIMEOUT, QUEUE, PUBLISH = 12, 13, 14, 15
-- Working-only: true for a record stored as p (placed ahead, see the header), whose ready
-- entry is in `ready` whatever its state says.
local PRE = 16

-- The stored layout's defaults, by stored position (6..11); see the header.
local DEFAULT_TTR, DEFAULT_PRIO = 60000, 1024

-- The queue a stored record (unpacked, in the stored layout) is indexed and counted under:
-- its topic, or its topic's callback queue for a callback or publish job (see the header).
local function stored_queue(r)
  if r[12] then return r[2] .. ',callback' end
  return r[2]
end

-- The group of a job placed ahead (the header): queue, priority and run_at.
local function group_of(queue, prio, run_at)
  return '\1' .. queue .. '\0' .. struct.pack('>I4I6', prio, run_at)
end

-- The group of ready member `m` (whose id starts at `id_at`) were it a job placed ahead, and
-- the member's priority and run_at.
local function member_group(m, id_at)
  local prio, run_at = struct.unpack('>I4I6', m, id_at - 17)
  return '\1' .. string.sub(m, 1, id_at - 8), prio, run_at
end

-- Jobs joining groups in this call, summed per group like `count` (only schedule_push adds;
-- flush_index writes them).
local group_delta, group_fields = {}, {}

-- Whether group `g` waits for its tick (its jobs are delayed).
local function group_waits(g)
  if group_delta[g] then return true end
  return redis.call('HEXISTS', DUE, g) == 1
end

-- A stored record (unpacked) as a working table.
local function decode(r)
  if #r == 11 and type(r[11]) == 'table' then -- the 11-element layout is the working one
    r[QUEUE] = r[TOPIC]
    return r
  end
  local j = {r[1], r[2], r[3], r[4], r[6] or DEFAULT_TTR, r[7] or DEFAULT_PRIO, r[8] or 0,
    r[10] or 0, r[11] or 0, r[5], r[9] or {}, r[12], r[13], stored_queue(r), r[14]}
  if j[S] == 'p' then
    j[PRE] = true
    if group_waits(group_of(j[QUEUE], j[PRIO], j[RUN_AT])) then j[S] = 'd' else j[S] = 'r' end
  end
  return j
end

-- A stored record `raw` unpacked in the stored layout, when it decodes, is in state `state`
-- and has the fields its index entries are made of (topic, run_at, seq, priority) as they
-- must be; else nil, with true as a second value for a record in the 11-element layout
-- (whose positions differ: it takes a working record).
local function unpack_stored(raw, state)
  local ok, r = pcall(cmsgpack.unpack, raw)
  if not ok or type(r) ~= 'table' or r[1] ~= state or type(r[2]) ~= 'string'
    or type(r[4]) ~= 'number' or type(r[5]) ~= 'number' then
    return nil, nil
  end
  if #r == 11 and type(r[11]) == 'table' then return nil, true end
  if r[7] ~= nil and type(r[7]) ~= 'number' then return nil, nil end
  return r, nil
end

-- Stored positions whose default `encode` omits at the end (9, backoff, is omitted when empty).
local ENCODE_DEFAULTS = {[6] = DEFAULT_TTR, [7] = DEFAULT_PRIO, [8] = 0, [10] = 0, [11] = 0}

-- A working table packed in the stored layout, trailing defaults omitted.
local function encode(j)
  local r = {j[S], j[TOPIC], j[BODY], j[RUN_AT], j[SEQ], j[TTR], j[PRIO], j[MAXATT], j[BACKOFF],
    j[ATT], j[RU]}
  if j[CB_URL] then
    r[12], r[13], r[14] = j[CB_URL], j[CB_TIMEOUT], j[PUBLISH]
    return cmsgpack.pack(r)
  end
  local defaults = ENCODE_DEFAULTS
  local n = 11
  while n > 5 do
    if n == 9 then
      if #r[9] > 0 then break end
    elseif r[n] ~= defaults[n] then
      break
    end
    r[n] = nil
    n = n - 1
  end
  return cmsgpack.pack(r)
end

-- The window a time falls in (keys.rs window_of). Exact: t < 2^53, and t / WINDOW_MS is far
-- enough from the next integer for doubles at these magnitudes.
-- An integer as the decimal string Redis parses: redis.call turns a Lua number into a string
-- with "%.14g", several times dearer than "%d".
local function num(n)
  return string.format('%d', n)
end

local function window_of(t)
  return math.floor(t / WINDOW_MS)
end

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
  return decode(cmsgpack.unpack(raw))
end

-- A stored record (`raw`, nil or false when there is none) as a working table, or nil when it
-- does not decode: see `load_lenient`.
local function decode_lenient(raw)
  if not raw then return nil end
  local ok, r = pcall(cmsgpack.unpack, raw)
  if not ok or type(r) ~= 'table' or type(r[1]) ~= 'string' or type(r[2]) ~= 'string'
    or type(r[4]) ~= 'number' then
    return nil
  end
  local j = decode(r)
  if type(j[SEQ]) ~= 'number' or type(j[TTR]) ~= 'number' or type(j[BACKOFF]) ~= 'table' then
    return nil
  end
  return j
end

-- Like `load`, but a record that does not decode counts as absent. For scans over indexes
-- (reserve, tick, kick_topic): one foreign value must not fail every pass, nor make the
-- timer spin on it. Its index entry is then dropped; the field stays for inspection.
local function load_lenient(id)
  return decode_lenient(redis.call('HGET', JOBS, id))
end

-- `redis.call(cmd, key, ...)` over `list` in chunks of 500 (Lua's stack limits unpack; an even
-- size, so field/value and score/member pairs stay whole); table replies concatenated.
local function call_chunked(cmd, key, list)
  local out = {}
  for i = 1, #list, 500 do
    local r = redis.call(cmd, key, unpack(list, i, math.min(i + 499, #list)))
    if type(r) == 'table' then
      for _, v in ipairs(r) do out[#out + 1] = v end
    end
  end
  return out
end

-- A ready zset member (the header): queue, priority, run_at, seq, id.
local function ready_member_of(queue, prio, run_at, seq, id)
  return queue .. '\0' .. struct.pack('>I4I6I7', prio, run_at, seq) .. id
end

local function ready_member(id, j)
  return ready_member_of(j[QUEUE], j[PRIO], j[RUN_AT], j[SEQ], id)
end

local function dead_member(id, j)
  return j[QUEUE] .. '\0' .. struct.pack('>I7', j[SEQ]) .. id
end

-- Where the id starts in a ready / dead member of `topic`.
local function ready_id_at(topic) return #topic + 19 end
local function dead_id_at(topic) return #topic + 9 end

-- ZRANGEBYLEX bounds of one topic's entries in the ready or dead zset.
local function topic_min(topic) return '[' .. topic .. '\0' end
local function topic_max(topic) return '(' .. topic .. '\1' end

-- The topic of a queue: the queue without ',callback' (a callback queue's).
local function queue_topic(q)
  if string.sub(q, -9) == ',callback' then return string.sub(q, 1, -10) end
  return q
end

-- The topic of a working record.
local function topic_of(j)
  return queue_topic(j[QUEUE])
end

-- A `due` field: topic ('' for every topic) \0 the minute, 5 bytes big-endian.
local function due_field(topic, minute)
  return topic .. '\0' .. struct.pack('>I5', minute)
end

-- Changes of the `due` counts, summed per field like `count` and written by flush_events.
local due_delta, due_fields = {}, {}

local function due_add(f, delta)
  local d = due_delta[f]
  if d == nil then
    due_fields[#due_fields + 1] = f
    d = 0
  end
  due_delta[f] = d + delta
end

-- `delta` delayed jobs of `topic` due in `minute` enter (> 0) or leave (< 0) the schedule
-- counts.
local function count_due_in(topic, minute, delta)
  due_add(due_field(topic, minute), delta)
  due_add(due_field('', minute), delta)
end

-- A delayed job enters (delta 1) or leaves (-1) the schedule counts.
local function count_due(j, delta)
  count_due_in(topic_of(j), math.floor(j[RUN_AT] / WINDOW_MS), delta)
end

-- Count changes are summed here and written once per field by flush_events (a batch of 100
-- jobs of one topic: one HINCRBY per state touched, not two per job).
local count_delta, count_fields = {}, {}

local function count(topic, state, delta)
  local f = state .. topic
  local d = count_delta[f]
  if d == nil then
    count_fields[#count_fields + 1] = f
    d = 0
  end
  count_delta[f] = d + delta
end

local ev_seen, ev_ready, ev_due, ev_origin = {}, {}, nil, nil

local function emit_ready(topic)
  if not ev_seen[topic] then
    ev_seen[topic] = true
    ev_ready[#ev_ready + 1] = topic
  end
end

-- Index additions are gathered per key and written by flush_index with one command per key
-- (a batch of 100 pushes: one ZADD or RPUSH, not 100). Removals are immediate. Anything that
-- reads an index flushes first (timeline_head), and so does unindex of a job this run put
-- (`touched`), so no script sees the difference; flush_events ends every run with a flush.
local add_timeline, add_ready, add_dead, touched = {}, {}, {}, {}
-- Far window lists: ids per list key, the keys in first-use order, {window, min run_at} per key.
local add_lists, list_keys, list_first = {}, {}, {}

-- ZADD of score/member pairs, 500 pairs per command (Lua's unpack has a stack limit).
local function zadd_all(key, args)
  for i = 1, #args, 1000 do
    redis.call('ZADD', key, unpack(args, i, math.min(i + 999, #args)))
  end
end

local function flush_index()
  if #add_timeline > 0 then zadd_all(TIMELINE, add_timeline); add_timeline = {} end
  if #add_ready > 0 then zadd_all(READY, add_ready); add_ready = {} end
  if #add_dead > 0 then zadd_all(DEAD, add_dead); add_dead = {} end
  for _, key in ipairs(list_keys) do
    local ids = add_lists[key]
    for i = 1, #ids, 1000 do
      redis.call('RPUSH', key, unpack(ids, i, math.min(i + 999, #ids)))
    end
    local first = list_first[key]
    redis.call('ZADD', WINDOWS, 'LT', first[2], first[1])
  end
  if #list_keys > 0 then add_lists, list_keys, list_first = {}, {}, {} end
  if #group_fields > 0 then
    for _, g in ipairs(group_fields) do redis.call('HINCRBY', DUE, g, num(group_delta[g])) end
    group_delta, group_fields = {}, {}
  end
  touched = {}
end

-- Ends every transition that changes jobs: writes the summed count changes (HDEL at zero) and
-- publishes the events, at most one PUBLISH.
local function flush_events()
  flush_index()
  for _, f in ipairs(count_fields) do
    local d = count_delta[f]
    if d ~= 0 and redis.call('HINCRBY', COUNTS, f, num(d)) <= 0 then
      redis.call('HDEL', COUNTS, f)
    end
  end
  for _, f in ipairs(due_fields) do
    local d = due_delta[f]
    if d ~= 0 then
      local n = redis.call('HINCRBY', DUE, f, num(d))
      if n <= 0 then
        redis.call('HDEL', DUE, f)
        redis.call('ZREM', DUEIDX, f)
      elseif n == d then
        redis.call('ZADD', DUEIDX, '0', f)
      end
    end
  end
  local lines = {}
  for i, topic in ipairs(ev_ready) do lines[i] = 'R' .. topic end
  if ev_due then lines[#lines + 1] = 'D' .. string.format('%d', ev_due) end
  if #lines > 0 and ev_origin then table.insert(lines, 1, 'O' .. ev_origin) end
  if #lines > 0 then
    redis.call('PUBLISH', CHANNEL, table.concat(lines, '\n'))
  end
end

-- The timeline's head score, or nil (pending additions flushed first).
local function timeline_head()
  flush_index()
  local head = redis.call('ZRANGE', TIMELINE, '0', '0', 'WITHSCORES')
  if head[1] then return tonumber(head[2]) end
  return nil
end

-- The earlier of `t` (or nil) and the first window's drain time (its score - WINDOW_MS).
local function with_windows(t)
  local win = redis.call('ZRANGE', WINDOWS, '0', '0', 'WITHSCORES')
  if win[1] then
    local d = tonumber(win[2]) - WINDOW_MS
    if t == nil or d < t then t = d end
  end
  return t
end

-- The earliest timer as this call knows it: read once (false: none), then lowered by
-- every deadline the run adds. Removals in the run do not raise it, so it may be lower than
-- the truth, never higher: a deadline it hides was preceded by one the timers already wake
-- for, and the tick at that earlier time sees the new one.
local known_first
-- Until known_first is read: the timeline head as first read (false: empty). Every deadline
-- noted since was at or after it (an earlier one reads known_first), so it is still the head.
local known_head

-- Announces deadline `t` (a timer deadline or a window's drain time) if it is before every
-- timer the shard had, so timers sleeping until a later time wake up.
local function note_timer(t)
  if known_first == nil then
    if known_head == nil then known_head = timeline_head() or false end
    -- A timeline head at or before t already wakes the timers by t: nothing to announce,
    -- and the windows need not be read (a reserve among pending jobs: one read, not two).
    if known_head and known_head <= t then return end
    known_first = with_windows(known_head or nil) or false
  end
  if known_first == false or t < known_first then
    known_first = t
    if ev_due == nil or t < ev_due then ev_due = t end
  end
end

-- Sets a timer deadline for `id` (not in the timeline now).
local function set_timer(id, t)
  note_timer(t)
  add_timeline[#add_timeline + 1] = num(t)
  add_timeline[#add_timeline + 1] = id
end

-- Puts a delayed job in far window list `win` = {key, window number} instead of the
-- timeline; its drain time is announced like a deadline.
local function set_window(id, j, win)
  note_timer(j[RUN_AT] - WINDOW_MS)
  local key = win[1]
  local ids = add_lists[key]
  if ids == nil then
    ids = {}
    add_lists[key] = ids
    list_keys[#list_keys + 1] = key
    list_first[key] = {win[2], j[RUN_AT]}
  elseif j[RUN_AT] < list_first[key][2] then
    list_first[key][2] = j[RUN_AT]
  end
  ids[#ids + 1] = id
end

-- Whether the shard's flow hash exists, read once per call (nil: not yet this call).
local flow_any

-- A topic's packed flow control settings, or nil: one EXISTS per call while the shard has
-- none, so topics without settings cost nothing more.
local function flow_settings(topic)
  if flow_any == nil then flow_any = redis.call('EXISTS', FLOW) == 1 end
  if not flow_any then return nil end
  return redis.call('HGET', FLOW, 's' .. topic)
end

-- Removes a job's index entries and count (not its record). A delayed job in a window list
-- stays there (see the header): the drain drops it. `off_timeline`: the caller has already
-- removed the job's timeline entry (tick: every due entry at once).
local function unindex(id, j, off_timeline)
  if touched[id] then flush_index() end
  local s = j[S]
  if j[PRE] then
    -- Placed ahead (the header): its ready entry goes whatever its state; while its group
    -- waits, it leaves the group's count, and a group left empty leaves the timeline.
    j[PRE] = nil
    redis.call('ZREM', READY, ready_member(id, j))
    if s == 'd' then
      count_due(j, -1)
      local g = group_of(j[QUEUE], j[PRIO], j[RUN_AT])
      if redis.call('HINCRBY', DUE, g, -1) <= 0 then
        redis.call('HDEL', DUE, g)
        redis.call('ZREM', TIMELINE, g)
      end
    end
    count(j[QUEUE], s, -1)
    return
  end
  if s == 'd' or s == 'x' then
    if not off_timeline then redis.call('ZREM', TIMELINE, id) end
    if s == 'd' then count_due(j, -1) end
    -- A reservation ends: a topic with flow control may let a ready job out now.
    if s == 'x' then
      local topic = topic_of(j)
      if flow_settings(topic) then
        emit_ready(topic)
        emit_ready(topic .. ',callback')
      end
    end
  elseif s == 'r' then
    redis.call('ZREM', READY, ready_member(id, j))
  else
    redis.call('ZREM', DEAD, dead_member(id, j))
  end
  count(j[QUEUE], s, -1)
end

-- Adds a job's index entries (new or changed, already unindexed) and count; a delayed one
-- goes to window list `win` ({key, window number}) when given.
local function add_index(id, j, win)
  local s = j[S]
  if s == 'd' then count_due(j, 1) end
  if s == 'd' and win then
    set_window(id, j, win)
  elseif s == 'd' then
    set_timer(id, j[RUN_AT])
  elseif s == 'x' then
    set_timer(id, j[RU])
  elseif s == 'r' then
    add_ready[#add_ready + 1] = '0'
    add_ready[#add_ready + 1] = ready_member(id, j)
    emit_ready(j[QUEUE])
  else
    add_dead[#add_dead + 1] = '0'
    add_dead[#add_dead + 1] = dead_member(id, j)
  end
  touched[id] = true
  count(j[QUEUE], s, 1)
end

-- Indexes a new job placed ahead (schedule_push; the header): stored p, due at run_at > now,
-- its ready entry added now and its group's count and timeline entry kept. `j` has what
-- add_index reads (S 'd', RUN_AT, PRIO, SEQ, QUEUE).
local function add_ahead(id, j)
  local g = group_of(j[QUEUE], j[PRIO], j[RUN_AT])
  local d = group_delta[g]
  if d == nil then
    -- (set_timer may flush the index, and with it the groups' counts so far.)
    set_timer(g, j[RUN_AT])
    group_fields[#group_fields + 1] = g
    d = 0
  end
  group_delta[g] = d + 1
  add_ready[#add_ready + 1] = '0'
  add_ready[#add_ready + 1] = ready_member(id, j)
  count_due(j, 1)
  touched[id] = true
  count(j[QUEUE], 'd', 1)
end

-- Whether a job due at `run_at` may be placed ahead in its group now: the group waits, or has
-- no entry yet. A group with entries but no count was promoted (by an instance whose clock is
-- ahead of this call's): a job joining it would be counted delayed among ready ones, so it
-- takes the timeline instead.
local function can_place_ahead(j)
  local g = group_of(j[QUEUE], j[PRIO], j[RUN_AT])
  if group_waits(g) then return true end
  local lo = ready_member_of(j[QUEUE], j[PRIO], j[RUN_AT], 0, '')
  local hi = ready_member_of(j[QUEUE], j[PRIO], j[RUN_AT] + 1, 0, '')
  return #redis.call('ZRANGEBYLEX', READY, '[' .. lo, '(' .. hi, 'LIMIT', '0', '1') == 0
end

-- Promotes group `g` (the header): its waiting jobs become ready, counted in one step, and
-- its timeline entry goes. Returns how many were promoted.
local function fire_group(g)
  flush_index()
  redis.call('ZREM', TIMELINE, g)
  local v = redis.call('HGET', DUE, g)
  if not v then return 0 end
  redis.call('HDEL', DUE, g)
  local n = tonumber(v)
  if n <= 0 then return 0 end
  local queue = string.sub(g, 2, #g - 11)
  local run_at = struct.unpack('>I6', g, #g - 5)
  count(queue, 'd', -n)
  count(queue, 'r', n)
  count_due_in(queue_topic(queue), math.floor(run_at / WINDOW_MS), -n)
  emit_ready(queue)
  return n
end

-- Stores a job (new or changed, already unindexed): its record, index entries and count.
-- Returns the packed record.
local function put(id, j, win)
  add_index(id, j, win)
  local packed = encode(j)
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

-- reserve.lua's steps (here, not in its body, so a call does not build them anew).

-- A count as this run sees it (its own changes are summed until flush_events).
local function current(f)
  return tonumber(redis.call('HGET', COUNTS, f) or '0') + (count_delta[f] or 0)
end

-- Whether a reserve could hand out a job of `queue` (flow control aside): a ready entry that
-- is not a job placed ahead whose group waits for a later tick (the rest of such a job's
-- priority is due later still, as reserve.lua reads it).
local function has_ready(queue)
  flush_index()
  local lo, hi, id_at = topic_min(queue), topic_max(queue), ready_id_at(queue)
  while true do
    local m = redis.call('ZRANGEBYLEX', READY, lo, hi, 'LIMIT', '0', '1')[1]
    if not m then return false end
    local g, prio, run_at = member_group(m, id_at)
    if run_at <= NOW or not group_waits(g) then return true end
    local p = prio + 1
    if p > 0xFFFFFFFF then return false end
    lo = '[' .. queue .. '\0' .. struct.pack('>I4', p)
  end
end

-- How many of `want` jobs of `queue` its flow control lets out, and its bucket (nil: no rate).
local function allowance(queue, want)
  local topic = queue_topic(queue)
  local raw = flow_settings(topic)
  if not raw or want == 0 or not has_ready(queue) then return want, nil end
  local f = cmsgpack.unpack(raw)
  if f[2] == 1 then
    redis.call('HINCRBY', FLOW, 'hp' .. topic, 1)
    return 0, nil
  end
  local room, bucket = want, nil
  local rate, burst, limit = f[6], f[7], f[8]
  if rate > 0 then
    local b = redis.call('HGET', FLOW, 'b' .. topic)
    local tokens, stamp = burst, NOW
    if b then
      local t = cmsgpack.unpack(b)
      tokens, stamp = t[1], t[2]
    end
    if NOW > stamp then
      tokens = math.min(burst, tokens + (NOW - stamp) * rate / 1e9)
      stamp = NOW
    end
    bucket = {tokens, stamp, rate, topic}
    local whole = math.floor(tokens)
    if whole < room then
      redis.call('HINCRBY', FLOW, 'hr' .. topic, 1)
      room = whole
    end
  end
  if limit > 0 then
    local left = limit - current('x' .. topic) - current('x' .. topic .. ',callback')
    if left < 0 then left = 0 end
    if left < room then
      redis.call('HINCRBY', FLOW, 'hm' .. topic, 1)
      room = left
    end
  end
  return room, bucket
end

-- Takes `n` tokens from `bucket`; jobs left waiting get the next token's wake-up.
local function spend(queue, bucket, n)
  local tokens = bucket[1] - n
  redis.call('HSET', FLOW, 'b' .. bucket[4], cmsgpack.pack({tokens, bucket[2]}))
  if tokens < 1 and has_ready(queue) then
    if tokens < 0 then tokens = 0 end
    set_timer('\0' .. queue, NOW + math.max(1, math.ceil((1 - tokens) * 1e9 / bucket[3])))
  end
end

-- A ready job's stored record `raw` (the ready member `m`; stored `state` r, or p for a job
-- placed ahead whose group was promoted) as reserved now: state x, attempts
-- + 1, reserved until now + ttr; returns it packed and its deadline. Works on the stored layout
-- in place (no working record), so it writes exactly what lib.lua's `encode` would: every
-- position up to 11 present (reserved_until is never the default). nil, nil when the record
-- does not decode or does not match `m` (stale); nil, true for the 11-element layout, which
-- takes `reserve_working`.
local function reserve_stored(id, raw, m, state)
  local r, eleven = unpack_stored(raw, state)
  if not r then return nil, eleven end
  local ttr, prio = r[6] or DEFAULT_TTR, r[7] or DEFAULT_PRIO
  local backoff, att = r[9] or {}, r[10] or 0
  if type(ttr) ~= 'number' or type(backoff) ~= 'table' or type(att) ~= 'number' then
    return nil, nil
  end
  if ready_member_of(stored_queue(r), prio, r[4], r[5], id) ~= m then return nil, nil end
  local until_ = after(NOW, ttr)
  r[1], r[6], r[7], r[8], r[9], r[10], r[11] = 'x', ttr, prio, r[8] or 0, backoff, att + 1, until_
  return cmsgpack.pack(r), until_
end

-- The same through a working record (the 11-element layout): packed and deadline, or nil.
local function reserve_working(id, m)
  local j = load_lenient(id)
  if not (j and j[S] == 'r' and ready_member(id, j) == m) then return nil end
  j[S] = 'x'
  j[ATT] = j[ATT] + 1
  j[RU] = after(NOW, j[TTR])
  return encode(j), j[RU]
end

-- Starts a call: binds its keys and arguments and empties the per-call state (a call that
-- failed half way left its own behind).
local function begin(keys, args)
  KEYS, ARGV = keys, args
  JOBS, TIMELINE, READY, DEAD, COUNTS, WINDOWS = keys[1], keys[2], keys[3], keys[4], keys[5],
    keys[6]
  DUE, DUEIDX, FLOW = keys[7], keys[8], keys[9]
  CHANNEL, NOW = args[1], tonumber(args[2])
  -- New tables only for those the last call used: fewer allocations, less garbage collection.
  if next(count_fields) then count_delta, count_fields = {}, {} end
  if next(due_fields) then due_delta, due_fields = {}, {} end
  if next(ev_ready) then ev_seen, ev_ready = {}, {} end
  ev_due, ev_origin = nil, nil
  if next(add_timeline) then add_timeline = {} end
  if next(add_ready) then add_ready = {} end
  if next(add_dead) then add_dead = {} end
  if next(touched) then touched = {} end
  if next(list_keys) then add_lists, list_keys, list_first = {}, {}, {} end
  if next(group_fields) then group_delta, group_fields = {}, {} end
  known_first, known_head = nil, nil
  flow_any = nil
end
