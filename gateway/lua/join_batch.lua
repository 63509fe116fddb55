-- join_batch: new places for the fans one gateway worker gathered for one room within
-- one batching window (gw_batch.c), in their arrival order. join.lua's decisions, made
-- once for the whole batch: the room is read once, the numbers come from one INCRBY and
-- the pre-queue arrivals go in with one ZADD, so Redis' cost per join shrinks with the
-- batch (docs/design.md, "Numbering in batches").
-- KEYS: the room's keys (prelude.lua), then KEYS[12 .. 11+m] the bitmaps of used proofs
-- of work, one per challenge-expiry bucket and issuer that the batch's proofs fall in
-- (join.lua).
-- ARGV[1] = n (fans), ARGV[2] = m (bitmaps), ARGV[3] = p (fans with a proof),
-- ARGV[4 .. 3+m] = each bitmap's lifetime in seconds (set when it is made),
-- ARGV[4+m] = the fans, 48 bytes each in arrival order: the visitor id (32) and its
-- random pre-queue score (join.lua's ARGV[2]) as 16 zero-padded digits;
-- ARGV[5+m] = each bitmap's count of proofs (4 digits each), ARGV[6+m] = each proof's fan
-- (its index, 1-based, in 4 digits), ARGV[7+m .. 6+m+4p] = the proofs, grouped by bitmap
-- in the order of the bitmaps, each as the BITFIELD subcommand 'SET', 'u1', its serial,
-- '1'. The fans are one string, not arguments of their own: an open room never looks at
-- them, and Redis pays per argument. The proofs are arguments, so that each bitmap's run
-- of them is one BITFIELD as it came, which answers every bit's old value in order: a 1
-- is a proof used before, or twice in this batch; the owners are read only for a replay.
-- Returns, for the whole batch: {'unknown'} | {'sold_out'} | {'closed'} |
-- {'not_open', prequeue_at} | {'code_required', phase} (joins with a code go to join.lua); or one mark per fan (a string of n characters) with
--   {'queued', gen, now, first, marks}: 'q' placed, numbered first, first+1, ... in the
--     order of the 'q' marks; 'r' its proof was used already (no number taken)
--   {'prequeue', gen, now, opens_at, marks}: 'p' in the pre-queue, 'r' replayed,
--     'f' the pre-queue was full (join.lua's 'prequeue_full')
-- A replayed proof refuses its own fan only; a number is never taken for a fan that is
-- not placed, so the block handed out is contiguous.
local FAN = 48
local n, m, p = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local fans, counts, owners = ARGV[4 + m], ARGV[5 + m], ARGV[6 + m]
if #fans ~= FAN * n or #counts ~= 4 * m or #owners ~= 4 * p or #ARGV ~= 6 + m + 4 * p then
    return redis.error_reply('join_batch: the fans, counts, owners or proofs do not add up')
end
local c, now, refused = join_gate(false)
if refused then
    return refused
end
local placed, replayed = n, {}
local at, o = 7 + m, 0 -- the first argument of bitmap j's proofs; proofs before it
for j = 1, m do
    local key, cnt = KEYS[11 + j], tonumber(string.sub(counts, 4 * j - 3, 4 * j))
    local old = redis.call('BITFIELD', key, unpack(ARGV, at, at + 4 * cnt - 1))
    for k = 1, cnt do
        if old[k] == 1 then -- replays: used before, or twice in this batch
            replayed[tonumber(string.sub(owners, 4 * (o + k) - 3, 4 * (o + k)))] = true
            placed = placed - 1
        end
    end
    -- a bitmap made by this batch lives until its bucket's challenges expire
    redis.call('EXPIRE', key, ARGV[3 + j], 'NX')
    at, o = at + 4 * cnt, o + cnt
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
