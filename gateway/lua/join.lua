-- join: a new place. KEYS: the room's keys (prelude.lua). ARGV[1] = visitor id,
-- ARGV[2] = a random integer below 2^53 (the visitor's order in a random_at_open
-- pre-queue; drawn by the gateway, never by the fan).
-- Before the opening the visitor enters the pre-queue (at most max_prequeue members);
-- after it, the next number.
-- A presale code (gw_code.h; its MAC already checked by the gateway): ARGV[5] = its batch,
-- ARGV[6] = its serial, and KEYS[12..15] = the room's code holders, batches, uses and
-- revocations (gw_rediskeys.h, GW_KEY_HOLDERS ...). The code must be of a batch issued
-- for the phase the join is placed under (prelude.lua's join_gate), not revoked, and have
-- a use left; the place and the use are taken together, so one code never places more
-- fans than its uses, whatever the gateways. The visitor is recorded as a holder of that
-- phase (admit.lua admits a requires_code phase only to its holders).
-- The proof of work (optional, after the code's keys if any: KEYS[12] or KEYS[16]) = the
-- bitmap of used proofs of one issuer whose challenges expire in the same bucket
-- ('os:{e}:q:pw:<bucket>:<issuer>', gw_queue.c proof_set), ARGV[3] = the join's proof's
-- serial (its bit), ARGV[4] = seconds until every challenge of the bucket has expired
-- (the bitmap's lifetime, set when it is made): a proof places one fan. ARGV[3], ARGV[4]
-- are '' without a proof when a code follows.
-- A customer's join (the sale site's enqueue token, gw_enqueue.h): ARGV[7] = '1', ARGV[1] =
-- the customer id (ARGV[3..6] '' when unused) and the last key = the room's customers
-- (GW_KEY_CUSTOMERS: customer -> number, or 'p' in the pre-queue). One customer, one place:
-- a customer placed already gets that place again, whatever browser asks and whatever
-- code or proof it brings (nothing is taken: no code use, no proof marked, no number).
-- Returns {'queued', gen, number, now} | {'prequeue', gen, 0, now} | {'unknown'} |
-- {'sold_out'} | {'closed'} | {'not_open', prequeue_at} | {'prequeue_full', opens_at} |
-- {'replayed'} (the proof was used already) | {'code_required', phase} |
-- {'code_unknown'} | {'code_revoked'} | {'code_used_up'} | {'code_wrong_phase', phase}.
-- Cost: this script is Redis' whole share of a join, so it reads only the fields it needs
-- (HMGET and HGET, not HGETALL of the settings and the counters: ~15 -> ~9 µs per join,
-- docs/performance.md, round 3). A room always has a gen (settings.lua, advance.lua).
local coded = ARGV[5] ~= nil and ARGV[5] ~= ''
local cust = ARGV[7] == '1' and KEYS[#KEYS] or nil
local c, now, refused = join_gate(coded or cust ~= nil)
if refused then
    return refused
end
if cust then
    local had = redis.call('HGET', cust, ARGV[1])
    if had == 'p' then
        return {'prequeue', c.gen, 0, now}
    elseif had then
        return {'queued', c.gen, tonumber(had), now}
    end
    if not coded and c.phase and c.phase.code == '1' then
        return {'code_required', c.phase.name}
    end
end
local proof -- the proof's bitmap, when the join brings one (ARGV[3], its serial)
if ARGV[3] ~= nil and ARGV[3] ~= '' then
    proof = coded and KEYS[16] or KEYS[12]
end
local use -- the code's byte in the uses string, taken once the fan is placed
if coded then
    local meta = redis.call('HGET', KEYS[13], ARGV[5])
    if not meta then
        return {'code_unknown'}
    end
    local base, count, uses, revoked, phase = string.match(meta, '^(%d+):(%d+):(%d+):([01]):(.+)$')
    local serial = tonumber(ARGV[6])
    if base == nil or serial >= tonumber(count) then
        return {'code_unknown'}
    end
    local at = tonumber(base) + serial
    if revoked == '1' or redis.call('GETBIT', KEYS[15], at) == 1 then
        return {'code_revoked'}
    end
    if c.phase == nil or c.phase.name ~= phase then
        return {'code_wrong_phase', c.phase and c.phase.name or ''}
    end
    use = '#' .. at
    if redis.call('BITFIELD', KEYS[14], 'GET', 'u8', use)[1] >= tonumber(uses) then
        return {'code_used_up'}
    end
end
local st = {opened = redis.call('HGET', K.st, 'opened')}
open_room(c, st, now)
if st.opened ~= '1' and redis.call('ZCARD', K.pre) >= num(c.max_prequeue, 1000000) then
    return {'prequeue_full', c.opens_at or '0'}
end
if proof then
    if redis.call('SETBIT', proof, ARGV[3], 1) == 1 then
        return {'replayed'}
    end
    redis.call('EXPIRE', proof, ARGV[4], 'NX')
end
if use then
    redis.call('BITFIELD', KEYS[14], 'INCRBY', 'u8', use, 1)
    redis.call('HSET', KEYS[12], ARGV[1], c.phase.name)
end
if st.opened ~= '1' then
    local score = ARGV[2]
    if c.mode == 'fifo' then
        score = redis.call('HINCRBY', K.st, 'pseq', 1)
    end
    redis.call('ZADD', K.pre, 'NX', score, ARGV[1])
    if cust then
        redis.call('HSET', cust, ARGV[1], 'p')
    end
    return {'prequeue', c.gen, 0, now}
end
local n = redis.call('INCR', K.n)
if cust then
    redis.call('HSET', cust, ARGV[1], n)
end
return {'queued', c.gen, n, now}
