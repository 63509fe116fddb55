-- Takes a general-admission hold: a conditional decrement that never goes below zero.
-- Free units are the counter plus every expired held unit (ZCOUNT), so the answer is
-- exact whatever the backlog of expired holds; the script returns to the counter only
-- as many expired units as it needs (plus a bounded number, for storage).
-- With an Idempotency-Key, and with a token not verified (ARGV 11 its record's id): as
-- hold_seats.lua.
-- KEYS: 1 seed, 2 hold record, 3 buyer zset, 4 pool counter, 5 pool units, 6 active,
--       7 idempotency record
-- ARGV: 1 hold id, 2 buyer, 3 ttl ms, 4 max hold ms, 5 max per buyer, 6 pool id,
--       7 quantity, 8 amount, 9 record keep ms, 10 request hash ('' = no key),
--       11 the token record that must exist: hex SHA-256 of the token ('' = verified)
-- Reply: {'OK', exp, left} | {'SOLDOUT'} ({'SOLDOUT', 'sold'} when no unit is held either)
--        | {'INSUFFICIENT', available} | {'LIMIT', units}
--        | {'NOSEED'} | {'REPLAY', hold id} | {'MISMATCH'} | {'UNVERIFIED'}
local refused = hold_gate(KEYS[1], ARGV[11], KEYS[7], ARGV[10])
if refused then
    return refused
end
local now = now_ms()
local free = pool_free(KEYS[4], KEYS[5], now)
if free == nil then
    return {'NOSEED'}
end
local qty = tonumber(ARGV[7])
if free <= 0 then
    -- no unit held either: every one is booked (the reserve remembers it a while)
    return redis.call('ZCARD', KEYS[5]) == 0 and {'SOLDOUT', 'sold'} or {'SOLDOUT'}
end
if free < qty then
    return {'INSUFFICIENT', free}
end
local limit = tonumber(ARGV[5])
if limit > 0 then
    local have = buyer_units(KEYS[3], now)
    if have + qty > limit then
        return {'LIMIT', have}
    end
end
local counter = tonumber(redis.call('GET', KEYS[4]))
reclaim_units(KEYS[4], KEYS[5], now, math.max(qty - counter, 0) + 100)
local exp = now + tonumber(ARGV[3])
redis.call('DECRBY', KEYS[4], qty)
redis.call('HSET', KEYS[2], 'buyer', ARGV[2], 'state', 'held', 'exp', exp, 'pool', ARGV[6],
           'qty', qty, 'created', now, 'cap', now + tonumber(ARGV[4]), 'amount', ARGV[8])
redis.call('PEXPIREAT', KEYS[2], exp + tonumber(ARGV[9]))
local zadd = {'ZADD', KEYS[5]}
for _, m in ipairs(unit_members(ARGV[1], qty)) do
    zadd[#zadd + 1] = exp
    zadd[#zadd + 1] = m
end
redis.call(unpack(zadd))
redis.call('ZADD', KEYS[3], exp, qty .. ':' .. ARGV[1])
redis.call('ZADD', KEYS[6], 'GT', exp, ARGV[2])
idem_record(KEYS[7], ARGV[10], ARGV[1], exp + tonumber(ARGV[9]))
return {'OK', exp, free - qty}
