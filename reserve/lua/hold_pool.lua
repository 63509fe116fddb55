-- Takes a general-admission hold: a conditional decrement that never goes below zero,
-- after returning expired holds' units to the pool.
-- KEYS: 1 seed, 2 hold record, 3 buyer zset, 4 pool counter, 5 pool expiry zset
-- ARGV: 1 hold id, 2 buyer, 3 ttl ms, 4 max hold ms, 5 max per buyer, 6 pool id,
--       7 quantity, 8 amount, 9 record keep ms, 10 prefix
-- Reply: {'OK', exp, left} | {'SOLDOUT'} | {'INSUFFICIENT', available} | {'LIMIT', units}
--        | {'NOSEED'}
if redis.call('EXISTS', KEYS[1]) == 0 then
    return {'NOSEED'}
end
local now = now_ms()
reclaim_pool(ARGV[10], ARGV[6], now)
local avail = tonumber(redis.call('GET', KEYS[4]))
if avail == nil then
    return {'NOSEED'}
end
local qty = tonumber(ARGV[7])
if avail <= 0 then
    return {'SOLDOUT'}
end
if avail < qty then
    return {'INSUFFICIENT', avail}
end
local limit = tonumber(ARGV[5])
if limit > 0 then
    local have = buyer_units(KEYS[3], now)
    if have + qty > limit then
        return {'LIMIT', have}
    end
end
local exp = now + tonumber(ARGV[3])
redis.call('DECRBY', KEYS[4], qty)
redis.call('HSET', KEYS[2], 'buyer', ARGV[2], 'state', 'held', 'exp', exp, 'pool', ARGV[6],
           'qty', qty, 'created', now, 'cap', now + tonumber(ARGV[4]), 'amount', ARGV[8])
redis.call('PEXPIREAT', KEYS[2], exp + tonumber(ARGV[9]))
redis.call('ZADD', KEYS[5], exp, qty .. ':' .. ARGV[1])
redis.call('ZADD', KEYS[3], exp, qty .. ':' .. ARGV[1])
redis.call('ZADD', ARGV[10] .. 'active', 'GT', exp, ARGV[2])
return {'OK', exp, avail - qty}
