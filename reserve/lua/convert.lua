-- The converting step of a confirmation: re-checks that the hold is alive and the
-- caller's, then marks its seats sold (no TTL) or takes its units out of the held set
-- and hands out unit numbers. Idempotent per checkout: running it again for the same
-- checkout answers as the first time did. The buyer stays active while another hold of
-- theirs lives.
-- KEYS, ARGV 1-4: the acting layout (prelude).  ARGV: 5 checkout id, 6 record keep ms
--       (after conversion), 7 amount the buyer agreed to pay (must equal the hold's)
-- Reply: {'OK', exp, seats, pool, qty, created, cap, amount, checkout, units}
--        | {'EXPIRED', …} | {'CONVERTED', …} (by another checkout) | {'AMOUNT', …}
--        | {'NOTFOUND'} | {'GONE'} | {'STALE'}
local h, st = load_acting()
if not h then
    return {st}
end
if h.state == 'converted' then
    if h.checkout == ARGV[5] then
        return describe('OK', h)
    end
    return describe('CONVERTED', h)
end
local now = now_ms()
if h.exp <= now then
    return describe('EXPIRED', h)
end
-- Amounts are integers below 2^53 (RSV_PRICE_MAX): exact as Lua numbers.
if h.amount ~= ARGV[7] then
    return describe('AMOUNT', h)
end
if h.pool then
    local members = unit_members(ARGV[1], h.qty)
    for _, m in ipairs(members) do
        if not redis.call('ZSCORE', KEYS[5], m) then
            return describe('EXPIRED', h)
        end
    end
    redis.call('ZREM', KEYS[5], unpack(members))
    local last = redis.call('INCRBY', KEYS[6], h.qty)
    h.units = tostring(last - h.qty + 1)
else
    for i = 7, #KEYS do
        if redis.call('GET', KEYS[i]) ~= ARGV[1] then
            return describe('EXPIRED', h)
        end
    end
    for i = 7, #KEYS do
        redis.call('SET', KEYS[i], 'sold:' .. ARGV[5])
    end
end
h.checkout = ARGV[5]
redis.call('HSET', KEYS[1], 'state', 'converted', 'checkout', ARGV[5], 'units', h.units or '')
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[6]))
local member = h.qty .. ':' .. ARGV[1]
redis.call('ZADD', KEYS[2], '+inf', member)
refresh_active(KEYS[2], KEYS[3], h.buyer, now)
return describe('OK', h)
