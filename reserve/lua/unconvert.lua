-- Gives back what a converted hold took in Redis when Postgres refused the booking
-- (a unit already booked after a stale Redis restore, no free pool unit, or a booking
-- that kept failing) and the payment is refunded: the sold marks of this checkout on
-- seats Postgres does not have booked, the pool units Postgres does not have booked,
-- and the buyer-limit entry. Idempotent: the record remembers it was given back.
-- Only what was taken goes back, at most the hold's quantity: of a pool, the units
-- Postgres has and has not booked (one past the capacity, handed out by a stale counter,
-- was never there to give back).
-- KEYS, ARGV 1-4: the acting layout (prelude).  ARGV: 5 checkout id, 6 the hold's units
--       Postgres has not booked (comma-joined), 7 how many pool units return to the
--       counter
-- Reply: {'OK', seats freed, units returned} | {'NOOP'} (not converted by this checkout,
--        or given back before) | {'NOTFOUND'} | {'GONE'} | {'STALE'}
local h, st = load_acting()
if not h then
    return {st}
end
if h.state ~= 'converted' or h.checkout ~= ARGV[5] then
    return {'NOOP'}
end
local freed = 0
local free = {}
for _, s in ipairs(split(ARGV[6])) do
    free[s] = true
end
local seats = split(h.seats or '')
for i = 7, #KEYS do
    if free[seats[i - 6]] and redis.call('GET', KEYS[i]) == 'sold:' .. ARGV[5] then
        redis.call('DEL', KEYS[i])
        freed = freed + 1
    end
end
local back = 0
if h.pool then
    back = math.min(tonumber(ARGV[7]), h.qty)
    if back > 0 then
        redis.call('INCRBY', KEYS[4], back)
    end
end
redis.call('ZREM', KEYS[2], h.qty .. ':' .. ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'returned')
return {'OK', freed, back}
