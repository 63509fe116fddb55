-- Extends the owner's live hold to min(now + extension, cap), never shortening it.
-- Verifies ownership and acts in the same step (never GET-compare-then-write).
-- KEYS: 1 hold record.  ARGV: 1 prefix, 2 hold id, 3 buyer, 4 extension ms,
--       5 record keep ms
-- Reply: as get.lua ('OK' carries the new exp)
local P = ARGV[1]
local h, st = load_hold(P, ARGV[2], ARGV[3])
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
local exp = math.min(now + tonumber(ARGV[4]), h.cap)
if exp < h.exp then
    exp = h.exp
end
local member = h.qty .. ':' .. ARGV[2]
if h.pool then
    redis.call('ZADD', P .. 'pe:' .. h.pool, 'XX', exp, member)
else
    for _, seat in ipairs(split(h.seats)) do
        local k = P .. 's:' .. seat
        if redis.call('GET', k) ~= ARGV[2] then
            return describe('EXPIRED', h)
        end
        redis.call('PEXPIREAT', k, exp)
    end
end
redis.call('HSET', KEYS[1], 'exp', exp)
redis.call('PEXPIREAT', KEYS[1], exp + tonumber(ARGV[5]))
redis.call('ZADD', P .. 'b:' .. h.buyer, 'XX', exp, member)
redis.call('ZADD', P .. 'active', 'GT', exp, h.buyer)
h.exp = exp
return describe('OK', h)
