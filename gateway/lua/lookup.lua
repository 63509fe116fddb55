-- lookup: the number of a pre-queue ticket once the room has opened.
-- KEYS: the room's keys (prelude.lua). ARGV[1] = visitor id (from a verified ticket of
-- this room's generation), ARGV[2] = a random integer below 2^53 (as in join.lua).
-- A member's number is its rank in the frozen pre-queue plus one. A verified pre-queue
-- ticket whose entry Redis lost (FLUSHALL, a failover to a lagging replica) still gets a
-- place: back in the pre-queue before the opening, the next number after it, once (K.pl
-- remembers it) — the signed ticket is the proof that the fan queued.
-- Returns {'number', n} | {'prequeue'} (not open yet) | {'unknown'}.
local c = load_cfg()
if not c then
    return {'unknown'}
end
local st = hgetall(K.st)
open_room(c, st, now_ms())
if st.opened ~= '1' then
    if not redis.call('ZSCORE', K.pre, ARGV[1]) then
        local score = ARGV[2]
        if c.mode == 'fifo' then
            score = redis.call('HINCRBY', K.st, 'pseq', 1)
        end
        redis.call('ZADD', K.pre, 'NX', score, ARGV[1])
    end
    return {'prequeue'}
end
local rank = redis.call('ZRANK', K.pre, ARGV[1])
if rank and rank < num(st.pk, 0) then
    return {'number', rank + 1}
end
local n = redis.call('HGET', K.pl, ARGV[1])
if not n then
    n = redis.call('INCR', K.n)
    redis.call('HSET', K.pl, ARGV[1], n)
end
return {'number', tonumber(n)}
