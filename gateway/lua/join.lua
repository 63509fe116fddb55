-- join: a new place. KEYS: the room's keys (prelude.lua). ARGV[1] = visitor id,
-- ARGV[2] = a random integer below 2^53 (the visitor's order in a random_at_open
-- pre-queue; drawn by the gateway, never by the fan).
-- Before the opening the visitor enters the pre-queue (at most max_prequeue members);
-- after it, the next number.
-- KEYS[12] (optional) = the bitmap of used proofs of work of one issuer whose challenges
-- expire in the same bucket ('os:{e}:q:pw:<bucket>:<issuer>', gw_queue.c proof_set),
-- ARGV[3] = the join's proof's serial (its bit), ARGV[4] = seconds until every challenge
-- of the bucket has expired (the bitmap's lifetime, set when it is made): a proof places
-- one fan.
-- Returns {'queued', gen, number, now} | {'prequeue', gen, 0, now} | {'unknown'} |
-- {'sold_out'} | {'closed'} | {'not_open', prequeue_at} | {'prequeue_full', opens_at} |
-- {'replayed'} (the proof was used already).
-- Cost: this script is Redis' whole share of a join, so it reads only the fields it needs
-- (HMGET and HGET, not HGETALL of the settings and the counters: ~15 -> ~9 µs per join,
-- docs/performance.md, round 3). A room always has a gen (settings.lua, advance.lua).
local c, now, refused = join_gate()
if refused then
    return refused
end
if KEYS[12] then
    if redis.call('SETBIT', KEYS[12], ARGV[3], 1) == 1 then
        return {'replayed'}
    end
    redis.call('EXPIRE', KEYS[12], ARGV[4], 'NX')
end
local st = {opened = redis.call('HGET', K.st, 'opened')}
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
