-- join: a new place. KEYS: the room's keys (prelude.lua). ARGV[1] = visitor id,
-- ARGV[2] = a random integer below 2^53 (the visitor's order in a random_at_open
-- pre-queue; drawn by the gateway, never by the fan).
-- Before the opening the visitor enters the pre-queue (at most max_prequeue members);
-- after it, the next number.
-- Returns {'queued', gen, number, now} | {'prequeue', gen, 0, now} | {'unknown'} |
-- {'sold_out'} | {'closed'} | {'not_open', prequeue_at} | {'prequeue_full', opens_at}.
local c = load_cfg()
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
local st = hgetall(K.st)
open_room(c, st, now)
if st.opened ~= '1' then
    if redis.call('ZCARD', K.pre) >= num(c.max_prequeue, 1000000) then
        return {'prequeue_full', c.opens_at or '0'}
    end
    local score = ARGV[2]
    if c.mode == 'fifo' then
        score = redis.call('HINCRBY', K.st, 'pseq', 1)
    end
    redis.call('ZADD', K.pre, 'NX', score, ARGV[1])
    return {'prequeue', c.gen, 0, now}
end
return {'queued', c.gen, redis.call('INCR', K.n), now}
