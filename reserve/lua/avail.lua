-- Counts for the availability snapshot of one pool, exact at read time whatever the
-- backlog of expired holds (and returning a bounded number of them, for storage).
-- KEYS: 1 pool counter, 2 pool units.
-- Reply: {available, held}
local now = now_ms()
local free = pool_free(KEYS[1], KEYS[2], now) or 0
reclaim_units(KEYS[1], KEYS[2], now, 100)
return {free, redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')}
