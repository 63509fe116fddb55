-- join: KEYS[1] = P; ARGV[1] = visitor id, ARGV[2] = random seed (for the opening).
-- Returns {'queued', gen, number, now} | {'prequeue', gen, 0, now} | {'unknown'} |
-- {'sold_out'} | {'closed'} | {'not_open', prequeue_at}.
local P = KEYS[1]
local c = load_cfg(P)
if not c then
    return {'unknown'}
end
if c.sold_out == '1' then
    return {'sold_out'}
end
local now = now_ms()
if c.closes_at and now >= num(c.closes_at, 0) then
    return {'closed'}
end
if c.prequeue_at and now < num(c.prequeue_at, 0) then
    return {'not_open', c.prequeue_at}
end
local st = hgetall(P .. 'st')
open_room(P, c, st, now, ARGV[2])
if st.opened ~= '1' then
    redis.call('RPUSH', P .. 'pre', ARGV[1])
    return {'prequeue', c.gen, 0, now}
end
return {'queued', c.gen, redis.call('INCR', P .. 'n'), now}
