-- join_batch: new places for the fans one gateway worker gathered for one room within
-- one batching window (gw_batch.c), in their arrival order. join.lua's decisions, made
-- once for the whole batch: the room is read once, the numbers come from one INCRBY and
-- the pre-queue arrivals go in with one ZADD, so Redis' cost per join shrinks with the
-- batch (docs/design.md, "Numbering in batches").
-- KEYS: the room's keys (prelude.lua), then KEYS[12 .. 11+m] the sets of used proofs of
-- work, one per challenge-expiry bucket that the batch's proofs fall in (join.lua).
-- ARGV[1] = n (fans), ARGV[2] = m (proof sets), ARGV[3 .. 2+m] = each set's lifetime in
-- seconds (set when the set is made); then four per fan i, from a = 3+m+4(i-1):
-- ARGV[a] = visitor id, ARGV[a+1] = its random pre-queue score (join.lua's ARGV[2]),
-- ARGV[a+2] = the index j of its proof's set (KEYS[11+j]; 0: no proof),
-- ARGV[a+3] = its proof id ('' without one).
-- Returns, for the whole batch: {'unknown'} | {'sold_out'} | {'closed'} |
-- {'not_open', prequeue_at}; or one mark per fan (a string of n characters) with
--   {'queued', gen, now, first, marks}: 'q' placed, numbered first, first+1, ... in the
--     order of the 'q' marks; 'r' its proof was used already (no number taken)
--   {'prequeue', gen, now, opens_at, marks}: 'p' in the pre-queue, 'r' replayed,
--     'f' the pre-queue was full (join.lua's 'prequeue_full')
-- A replayed proof refuses its own fan only; a number is never taken for a fan that is
-- not placed, so the block handed out is contiguous.
local n, m = tonumber(ARGV[1]), tonumber(ARGV[2])
local cf = redis.call('HMGET', K.cfg, 'gen', 'sold_out', 'closes_at', 'prequeue_at',
                      'opens_at', 'mode', 'max_prequeue')
if not cf[1] then
    return {'unknown'}
end
local c = {gen = cf[1], sold_out = cf[2], closes_at = cf[3], prequeue_at = cf[4],
           opens_at = cf[5], mode = cf[6], max_prequeue = cf[7]}
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
local base = 3 + m
local placed, marks = n, nil
if m > 0 then
    marks = {}
    for i = 1, n do
        local a = base + 4 * (i - 1)
        local j = tonumber(ARGV[a + 2])
        marks[i] = 'q'
        if j > 0 and redis.call('SADD', KEYS[11 + j], ARGV[a + 3]) == 0 then
            marks[i] = 'r'
            placed = placed - 1
        end
    end
    for j = 1, m do -- a set made by this batch lives until its bucket's challenges expire
        if redis.call('TTL', KEYS[11 + j]) == -1 then
            redis.call('EXPIRE', KEYS[11 + j], ARGV[2 + j])
        end
    end
end
local st = {opened = redis.call('HGET', K.st, 'opened')}
open_room(c, st, now)
if st.opened == '1' then
    local first = 0
    if placed > 0 then
        first = redis.call('INCRBY', K.n, placed) - placed + 1
    end
    if marks == nil then
        return {'queued', c.gen, now, first, string.rep('q', n)}
    end
    return {'queued', c.gen, now, first, table.concat(marks)}
end
-- Before the opening: the pre-queue takes the batch's fans in order while it has room.
local room = num(c.max_prequeue, 1000000) - redis.call('ZCARD', K.pre)
local out, args, taken = {}, {}, 0
for i = 1, n do
    if marks and marks[i] == 'r' then
        out[i] = 'r'
    elseif taken < room then
        taken = taken + 1
        out[i] = 'p'
        args[2 * taken] = ARGV[base + 4 * (i - 1)]
        args[2 * taken - 1] = ARGV[base + 4 * (i - 1) + 1]
    else
        out[i] = 'f'
    end
end
if taken > 0 then
    if c.mode == 'fifo' then -- arrival order: the counter's next taken values
        local last = redis.call('HINCRBY', K.st, 'pseq', taken)
        for t = 1, taken do
            args[2 * t - 1] = last - taken + t
        end
    end
    redis.call('ZADD', K.pre, 'NX', unpack(args))
end
return {'prequeue', c.gen, now, c.opens_at or '0', table.concat(out)}
