-- Extends the owner's live hold to min(now + extension, cap), never shortening it. Every
-- seat is checked before any is touched: a hold that lost a seat is answered EXPIRED
-- with nothing lengthened. Verifies ownership and acts in the same step.
-- KEYS, ARGV 1-4: the acting layout (prelude).  ARGV: 5 extension ms, 6 record keep ms
-- Reply: as get.lua ('OK' carries the new exp) | {'STALE'}
local h, st = load_acting()
if not h then
    return {st}
end
if h.state == 'converted' then
    return describe('CONVERTED', h)
end
local now = now_ms()
if h.exp <= now then
    return describe('EXPIRED', h)
end
local exp = math.min(now + tonumber(ARGV[5]), h.cap)
if exp < h.exp then
    exp = h.exp
end
if h.pool then
    for _, m in ipairs(unit_members(ARGV[1], h.qty)) do
        if not redis.call('ZSCORE', KEYS[5], m) then
            return describe('EXPIRED', h)
        end
    end
    for _, m in ipairs(unit_members(ARGV[1], h.qty)) do
        redis.call('ZADD', KEYS[5], 'XX', exp, m)
    end
else
    for i = 7, #KEYS do
        if redis.call('GET', KEYS[i]) ~= ARGV[1] then
            return describe('EXPIRED', h)
        end
    end
    for i = 7, #KEYS do
        redis.call('PEXPIREAT', KEYS[i], exp)
    end
end
redis.call('HSET', KEYS[1], 'exp', exp)
redis.call('PEXPIREAT', KEYS[1], exp + tonumber(ARGV[6]))
redis.call('ZADD', KEYS[2], 'XX', exp, h.qty .. ':' .. ARGV[1])
redis.call('ZADD', KEYS[3], 'GT', exp, h.buyer)
h.exp = exp
return describe('OK', h)
