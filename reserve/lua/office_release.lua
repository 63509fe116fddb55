-- Puts a cancelled booking's units (or one refunded item) back on sale after Postgres
-- took them out of booking_items (onsale_office_cancel): deletes the sold marks this
-- booking left on its seats, returns pool units to the pool counter, and takes the units
-- off the buyer's count (max_per_buyer). Only units Postgres still has free are given
-- back, so a unit sold again since keeps its new mark. Idempotent per refund: the marker
-- key remembers it ran. An event Redis has not loaded (no seed) needs nothing: its next
-- seed reads Postgres, where the units are already free.
-- KEYS: 1 seed, 2 marker (rf:<refund>), 3 buyer zset, then either the pool counter (a
--       pool booking) or the free seats' keys
-- ARGV: 1 checkout id, 2 marker keep ms, 3 hold id, 4 booking id, 5 '1' for a pool
--       booking else '0', 6 free units to return to the pool counter, 7 units the
--       refund covers (the buyer's count drops by that many)
-- Reply: {'OK', seats freed, pool units returned} | {'NOOP'} (ran before) | {'NOSEED'}
if redis.call('EXISTS', KEYS[1]) == 0 then
    return {'NOSEED'}
end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', tonumber(ARGV[2])) == false then
    return {'NOOP'}
end
local freed, back = 0, 0
if ARGV[5] == '1' then
    back = tonumber(ARGV[6])
    if back > 0 and KEYS[4] then
        redis.call('INCRBY', KEYS[4], back)
    end
else
    for i = 4, #KEYS do
        local v = redis.call('GET', KEYS[i])
        if v == 'sold:' .. ARGV[1] or v == 'sold' then
            redis.call('DEL', KEYS[i])
            freed = freed + 1
        end
    end
end
local n = tonumber(ARGV[7])
for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local units, id = string.match(m, '^(%d+):(.*)$')
    if units and (id == ARGV[3] or id == ARGV[4]) then
        redis.call('ZREM', KEYS[3], m)
        local rest = tonumber(units) - n
        if rest > 0 then
            redis.call('ZADD', KEYS[3], '+inf', rest .. ':' .. id)
        end
        break
    end
end
return {'OK', freed, back}
