-- Releases the owner's hold: seats become free and pool units return at once.
-- KEYS: 1 hold record.  ARGV: 1 prefix, 2 hold id, 3 buyer
-- Reply: {'OK'} (released, or had already expired) | {'CONVERTED'} | {'NOTFOUND'} | {'GONE'}
local P = ARGV[1]
local h, st = load_hold(P, ARGV[2], ARGV[3])
if not h then
    return {st}
end
if h.state == 'converted' then
    return {'CONVERTED'}
end
local member = h.qty .. ':' .. ARGV[2]
if h.pool then
    if redis.call('ZREM', P .. 'pe:' .. h.pool, member) == 1 then
        redis.call('INCRBY', P .. 'p:' .. h.pool, h.qty)
    end
else
    for _, seat in ipairs(split(h.seats)) do
        local k = P .. 's:' .. seat
        if redis.call('GET', k) == ARGV[2] then
            redis.call('DEL', k)
        end
    end
end
redis.call('ZREM', P .. 'b:' .. h.buyer, member)
redis.call('ZREM', P .. 'active', h.buyer)
redis.call('DEL', KEYS[1])
return {'OK'}
