-- Loads an event's working state from Postgres after Redis lost it (or on first use):
-- pool counters (capacity minus units booked), the last unit number booked, a 'sold'
-- mark on every booked seat, and every buyer's bought units (so max_per_buyer still
-- counts them). Does nothing if another process seeded first.
-- KEYS: 1 seed, then per pool (counter, next unit, units held), then the sold seats'
--       keys, then per booking its buyer's zset.
-- ARGV: 1 pool count, then per pool (available, last unit), then the sold seat count,
--       then per booking (booking id, units)
-- Reply: 1 seeded, 0 already seeded
if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
end
local npools = tonumber(ARGV[1])
local k, a = 2, 2
for _ = 1, npools do
    redis.call('SET', KEYS[k], ARGV[a])
    redis.call('SET', KEYS[k + 1], ARGV[a + 1])
    redis.call('DEL', KEYS[k + 2])
    k = k + 3
    a = a + 2
end
local nsold = tonumber(ARGV[a])
a = a + 1
for _ = 1, nsold do
    redis.call('SET', KEYS[k], 'sold')
    k = k + 1
end
while k <= #KEYS do
    redis.call('ZADD', KEYS[k], '+inf', ARGV[a + 1] .. ':' .. ARGV[a])
    k = k + 1
    a = a + 2
end
redis.call('SET', KEYS[1], '1')
return 1
