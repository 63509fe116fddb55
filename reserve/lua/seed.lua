-- Loads an event's working state from Postgres after Redis lost it (or on first use):
-- pool counters (capacity minus units booked), the last unit number booked, a 'sold'
-- mark on every booked seat, and every buyer's bought units (so max_per_buyer still
-- counts them). Does nothing if another process seeded first.
-- KEYS: 1 seed.  ARGV: 1 prefix, 2 pool count, then per pool (id, available, last unit),
--       then the sold seat count and the sold seat ids, then per booking (buyer,
--       booking id, units)
-- Reply: 1 seeded, 0 already seeded
if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
end
local P = ARGV[1]
local npools = tonumber(ARGV[2])
local i = 3
for _ = 1, npools do
    redis.call('SET', P .. 'p:' .. ARGV[i], ARGV[i + 1])
    redis.call('SET', P .. 'pn:' .. ARGV[i], ARGV[i + 2])
    redis.call('DEL', P .. 'pe:' .. ARGV[i])
    i = i + 3
end
local nsold = tonumber(ARGV[i])
i = i + 1
for _ = 1, nsold do
    redis.call('SET', P .. 's:' .. ARGV[i], 'sold')
    i = i + 1
end
while i + 2 <= #ARGV do
    redis.call('ZADD', P .. 'b:' .. ARGV[i], '+inf', ARGV[i + 2] .. ':' .. ARGV[i + 1])
    i = i + 3
end
redis.call('SET', KEYS[1], '1')
return 1
