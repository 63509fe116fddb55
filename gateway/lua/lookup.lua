-- lookup: the number a pre-queue member got at the opening.
-- KEYS[1] = P; ARGV[1] = visitor id, ARGV[2] = random seed.
-- Returns {'number', n} | {'prequeue'} (not open yet) | {'missing'} | {'unknown'}.
local P = KEYS[1]
local c = load_cfg(P)
if not c then
    return {'unknown'}
end
local st = hgetall(P .. 'st')
open_room(P, c, st, now_ms(), ARGV[2])
if st.opened ~= '1' then
    return {'prequeue'}
end
local n = redis.call('HGET', P .. 'pn', ARGV[1])
if not n then
    return {'missing'}
end
return {'number', tonumber(n)}
