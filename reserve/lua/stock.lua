-- The stock feed (docs/design.md, "The stock feed"): one event's units as the reserve's
-- last availability snapshot counted them, for the gateway to read. Only the reserve
-- writes it (the gateway's Redis user may only read it); the hash dies PEXPIRE after
-- its last write, so a reserve that stopped leaves no stock behind.
-- KEYS: 1 stock hash.
-- ARGV: 1 left (units neither sold nor in a live hold), 2 held (units in live holds),
--       3 total (seats plus pool capacities), 4 the event's catalogue version,
--       5 the hash's life in ms.
-- Reply: the Redis TIME written as `at` (ms).
local now = now_ms()
redis.call('HSET', KEYS[1], 'left', ARGV[1], 'held', ARGV[2], 'total', ARGV[3],
    'version', ARGV[4], 'at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return now
