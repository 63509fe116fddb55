-- delete: removes a waiting room and its queue state (not the active set, which reserve
-- shares), and leaves a tombstone (its gen, for a day) so that no gateway still holding
-- the room in memory writes it back (advance.lua's recovery). UNLINK: a large pre-queue
-- or admission hash is freed off the main thread.
-- KEYS: the room's keys (prelude.lua). Returns 1 when the room existed, else 0.
local gen = redis.call('HGET', K.cfg, 'gen')
redis.call('UNLINK', K.cfg, K.n, K.st, K.wb, K.pre, K.pl, K.cb, K.sb, K.adm)
if not gen then
    return 0
end
redis.call('SET', K.gone, gen, 'EX', 86400)
return 1
