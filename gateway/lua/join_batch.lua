-- join_batch: new places for the fans one gateway worker gathered for one room within
-- one batching window (gw_batch.c), in their arrival order. join.lua's decisions, made
-- once for the whole batch: the room is read once, the numbers come from one INCRBY and
-- the pre-queue arrivals go in with one ZADD, so Redis' cost per join shrinks with the
-- batch (docs/design.md, "Numbering in batches").
-- KEYS: the room's keys (prelude.lua), then KEYS[12 .. 11+m] the sets of used proofs of
-- work, one per challenge-expiry bucket that the batch's proofs fall in (join.lua).
-- ARGV[1] = n (fans), ARGV[2] = m (proof sets), ARGV[3] = p (fans with a proof),
-- ARGV[4 .. 3+m] = each set's lifetime in seconds (set when the set is made),
-- ARGV[4+m] = the fans, 48 bytes each in arrival order: the visitor id (32) and its
-- random pre-queue score (join.lua's ARGV[2]) as 16 zero-padded digits; then three per
-- fan with a proof, from a = 5+m+3t: ARGV[a] = the fan's index (1-based), ARGV[a+1] =
-- its set's index j (KEYS[11+j]), ARGV[a+2] = the proof's id. One string for the fans,
-- not arguments of their own: an open room never looks at them, and Redis pays per
-- argument.
-- Returns, for the whole batch: {'unknown'} | {'sold_out'} | {'closed'} |
-- {'not_open', prequeue_at}; or one mark per fan (a string of n characters) with
--   {'queued', gen, now, first, marks}: 'q' placed, numbered first, first+1, ... in the
--     order of the 'q' marks; 'r' its proof was used already (no number taken)
--   {'prequeue', gen, now, opens_at, marks}: 'p' in the pre-queue, 'r' replayed,
--     'f' the pre-queue was full (join.lua's 'prequeue_full')
-- A replayed proof refuses its own fan only; a number is never taken for a fan that is
-- not placed, so the block handed out is contiguous.
local FAN = 48
local n, m, p = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local fans = ARGV[4 + m]
if #fans ~= FAN * n then
    return redis.error_reply('join_batch: the fans are not 48 bytes each')
end
local c, now, refused = join_gate()
if refused then
    return refused
end
local placed, replayed = n, {}
if p > 0 then
    for t = 0, p - 1 do
        local a = 5 + m + 3 * t
        if redis.call('SADD', KEYS[11 + tonumber(ARGV[a + 1])], ARGV[a + 2]) == 0 then
            replayed[tonumber(ARGV[a])] = true
            placed = placed - 1
        end
    end
    for j = 1, m do -- a set made by this batch lives until its bucket's challenges expire
        if redis.call('TTL', KEYS[11 + j]) == -1 then
            redis.call('EXPIRE', KEYS[11 + j], ARGV[3 + j])
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
    if placed == n then
        return {'queued', c.gen, now, first, string.rep('q', n)}
    end
    local marks = {}
    for i = 1, n do
        marks[i] = replayed[i] and 'r' or 'q'
    end
    return {'queued', c.gen, now, first, table.concat(marks)}
end
-- Before the opening: the pre-queue takes the batch's fans in order while it has room.
local room = num(c.max_prequeue, 1000000) - redis.call('ZCARD', K.pre)
local out, args, taken = {}, {}, 0
for i = 1, n do
    if replayed[i] then
        out[i] = 'r'
    elseif taken < room then
        local at = FAN * (i - 1)
        taken = taken + 1
        out[i] = 'p'
        args[2 * taken - 1] = string.sub(fans, at + 33, at + FAN)
        args[2 * taken] = string.sub(fans, at + 1, at + 32)
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
