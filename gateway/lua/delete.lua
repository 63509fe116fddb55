-- delete: removes a waiting room and its queue state (not the active set, which reserve
-- shares). KEYS[1] = P. Returns 1 when the room existed, else 0.
local P = KEYS[1]
local existed = redis.call('EXISTS', P .. 'cfg')
redis.call('DEL', P .. 'cfg', P .. 'n', P .. 'st', P .. 'wb', P .. 'pre', P .. 'pn', P .. 'cb',
           P .. 'adm')
return existed
