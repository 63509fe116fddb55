-- Counts for the availability snapshot of one pool (reclaiming expired holds first).
-- KEYS: 1 pool counter.  ARGV: 1 prefix, 2 pool id
-- Reply: {available, held}
local P = ARGV[1]
local now = now_ms()
reclaim_pool(P, ARGV[2], now)
local held = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', P .. 'pe:' .. ARGV[2], '(' .. now, '+inf')) do
    held = held + units_of(m)
end
return {tonumber(redis.call('GET', KEYS[1]) or '0'), held}
