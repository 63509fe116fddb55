-- Releases the owner's hold: seats become free and pool units return at once. The buyer
-- stays active while another hold of theirs lives.
-- KEYS, ARGV 1-4: the acting layout (prelude).
-- Reply: {'OK'} (released, or had already expired) | {'CONVERTED'} | {'NOTFOUND'} | {'GONE'}
--        | {'STALE'}
local h, st = load_acting()
if not h then
    return {st}
end
if h.state == 'converted' then
    return {'CONVERTED'}
end
local now = now_ms()
if h.pool then
    local n = redis.call('ZREM', KEYS[5], unpack(unit_members(ARGV[1], h.qty)))
    if n > 0 then
        redis.call('INCRBY', KEYS[4], n)
    end
else
    for i = 7, #KEYS do
        if redis.call('GET', KEYS[i]) == ARGV[1] then
            redis.call('DEL', KEYS[i])
        end
    end
end
redis.call('ZREM', KEYS[2], h.qty .. ':' .. ARGV[1])
refresh_active(KEYS[2], KEYS[3], h.buyer, now)
redis.call('DEL', KEYS[1])
return {'OK'}
