-- The converting step of a confirmation: re-checks that the hold is alive and the
-- caller's, then marks its seats sold (no TTL) or takes its units out of the pool's
-- expiry set and hands out unit numbers. Idempotent per checkout: running it again for
-- the same checkout answers as the first time did.
-- KEYS: 1 hold record.  ARGV: 1 prefix, 2 hold id, 3 buyer, 4 checkout id,
--       5 record keep ms (after conversion), 6 amount the buyer agreed to pay
--       (must equal the hold's amount)
-- Reply: {'OK', exp, seats, pool, qty, created, cap, amount, checkout, units}
--        | {'EXPIRED', …} | {'CONVERTED', …} (by another checkout) | {'AMOUNT', …}
--        | {'NOTFOUND'} | {'GONE'}
local P = ARGV[1]
local h, st = load_hold(P, ARGV[2], ARGV[3])
if not h then
    return {st}
end
if h.state == 'converted' then
    if h.checkout == ARGV[4] then
        return describe('OK', h)
    end
    return describe('CONVERTED', h)
end
local now = now_ms()
if h.exp <= now then
    return describe('EXPIRED', h)
end
if tonumber(h.amount) ~= tonumber(ARGV[6]) then
    return describe('AMOUNT', h)
end
local member = h.qty .. ':' .. ARGV[2]
if h.pool then
    if redis.call('ZREM', P .. 'pe:' .. h.pool, member) == 0 then
        return describe('EXPIRED', h)
    end
    local last = redis.call('INCRBY', P .. 'pn:' .. h.pool, h.qty)
    h.units = tostring(last - h.qty + 1)
else
    local seats = split(h.seats)
    for _, seat in ipairs(seats) do
        if redis.call('GET', P .. 's:' .. seat) ~= ARGV[2] then
            return describe('EXPIRED', h)
        end
    end
    for _, seat in ipairs(seats) do
        redis.call('SET', P .. 's:' .. seat, 'sold:' .. ARGV[4])
    end
end
h.checkout = ARGV[4]
redis.call('HSET', KEYS[1], 'state', 'converted', 'checkout', ARGV[4], 'units', h.units or '')
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
redis.call('ZADD', P .. 'b:' .. h.buyer, '+inf', member)
redis.call('ZREM', P .. 'active', h.buyer)
return describe('OK', h)
