-- delete: removes a waiting room and its queue state (not the active set, which reserve
-- shares), and leaves a tombstone (its gen, for a day) so that no gateway still holding
-- the room in memory writes it back (advance.lua's recovery). UNLINK: a large pre-queue
-- or admission hash is freed off the main thread.
-- KEYS: the room's keys (prelude.lua), then its presale codes' keys (KEYS[12..]: holders,
-- batches, uses, revocations; gw_rediskeys.h): codes are derived under the room's gen,
-- so a room made again under the same event id takes none of the old ones; then its
-- customers' places (KEYS[16]), numbers of this room only.
-- Returns 1 when the room existed, else 0.
local gen = redis.call('HGET', K.cfg, 'gen')
redis.call('UNLINK', K.cfg, K.n, K.st, K.wb, K.pre, K.pl, K.cb, K.sb, K.adm)
for i = 12, #KEYS do
    redis.call('UNLINK', KEYS[i])
end
if not gen then
    return 0
end
redis.call('SET', K.gone, gen, 'EX', 86400)
return 1
