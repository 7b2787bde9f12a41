-- unreserve: gives back jobs this instance reserved ahead and handed to no consumer
-- (read_ahead.rs): each one still reserved until exactly the deadline given becomes ready
-- again, with its attempts as before that reservation, in its place in its queue (the ready
-- member is the same). Any other (finished, released, reserved again since, gone) is left as it is.
-- KEYS: the shard's keys (lib.lua).
-- ARGV[1] channel, ARGV[2] now, ARGV[3..] pairs of id and reserved_until.
-- Returns how many were given back.
local back = 0
for i = 3, #ARGV - 1, 2 do
  local id = ARGV[i]
  local j = load_lenient(id)
  if j and j[S] == 'x' and j[RU] == tonumber(ARGV[i + 1]) then
    unindex(id, j)
    j[S] = 'r'
    j[RU] = 0
    if j[ATT] > 0 then j[ATT] = j[ATT] - 1 end
    put(id, j)
    back = back + 1
  end
end
flush_events()
return back
