-- Shared by every reserve script (prepended at load time). Every key a script touches
-- is declared in KEYS by the caller (reserve/rsv_rediskeys.h names them), all under the
-- event's hash tag 'os:{<event>}:', so one Redis Cluster slot holds an event and each
-- script stays atomic there:
--   seed            present once the event's counters and sold seats are loaded
--   s:<seat>        seat: hold id (PX = hold expiry) or 'sold[:<checkout>]' (no TTL)
--   h:<hold>        hold record (hash), kept hold_record_keep after expiry
--   b:<buyer>       buyer's units: zset member '<units>:<hold>', score = expiry
--                   ('+inf' once bought)
--   p:<pool>        pool units neither sold nor in pu:<pool> (never below zero)
--   pu:<pool>       pool units held: one member '<hold>#<i>' per unit, score = expiry;
--                   expired members are free units (ZCOUNT: exact at any backlog)
--   pn:<pool>       last pool unit number handed to a booking
--   ik:<sha256>     a hold creation's Idempotency-Key (sha256 of buyer and key):
--                   '<request hash>:<hold id>', kept as long as the hold record
--   tk:<sha256>     an admission token the gateway signed (hex SHA-256 of the whole
--                   token), written by the gateway when it hands the token out and
--                   expiring with it: a buyer's first hold needs it or a verification
--                   (docs/tokens.md); only read here, and not declared in KEYS: Redis
--                   ACLs want write access to every declared key, and the reserve's
--                   Redis user may only read these (docs/operations.md)
--   active          shoppers the gateway admitted: member = visitor, score = when their
--                   activity lapses; a live hold keeps its taker active until it expires,
--                   a confirmation or release ends the activity once no other hold lives
-- Expiry is decided here, at read time, against Redis TIME: a hold is alive iff
-- now < exp. Nothing depends on a sweeper.
--
-- The scripts acting on an existing hold (extend, release, convert, unconvert) get the
-- hold's keys from a read of the record just before (get.lua): KEYS 1 hold record,
-- 2 buyer zset, 3 active, 4 pool counter, 5 pool units, 6 pool next, 7.. seat keys;
-- ARGV 1 hold id, 2 buyer, 3 seats (comma-joined, as read), 4 pool (as read), then the
-- script's own. A hold's items never change, so a mismatch means a corrupt call: 'STALE'.
local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function units_of(member)
    return tonumber(string.match(member, '^(%d+):'))
end

-- Pool units free right now: the counter plus every expired held unit.
local function pool_free(counter, units, now)
    local c = tonumber(redis.call('GET', counter))
    if c == nil then
        return nil
    end
    return c + redis.call('ZCOUNT', units, '-inf', now)
end

-- Returns up to n expired held units to the counter (storage, and what a hold needs).
local function reclaim_units(counter, units, now, n)
    if n <= 0 then
        return 0
    end
    local expired = redis.call('ZRANGEBYSCORE', units, '-inf', now, 'LIMIT', 0, n)
    if #expired == 0 then
        return 0
    end
    redis.call('ZREM', units, unpack(expired))
    redis.call('INCRBY', counter, #expired)
    return #expired
end

local function unit_members(hold, qty)
    local m = {}
    for i = 1, qty do
        m[i] = hold .. '#' .. i
    end
    return m
end

-- Units the buyer holds (alive) or bought, after dropping expired entries.
local function buyer_units(bkey, now)
    redis.call('ZREMRANGEBYSCORE', bkey, '-inf', now)
    local n = 0
    for _, m in ipairs(redis.call('ZRANGE', bkey, 0, -1)) do
        n = n + units_of(m)
    end
    return n
end

-- After one of the buyer's holds ended (released, converted, given back): the buyer
-- stays active until their latest other live hold expires, or not at all.
local function refresh_active(bkey, akey, buyer, now)
    local live = redis.call('ZREVRANGEBYSCORE', bkey, '(+inf', '(' .. now, 'WITHSCORES',
                            'LIMIT', 0, 1)
    if #live == 0 then
        redis.call('ZREM', akey, buyer)
    else
        redis.call('ZADD', akey, 'XX', live[2], buyer)
    end
end

-- A hold creation with an Idempotency-Key (hash ~= ''): the earlier answer, if any.
local function idem_check(ikey, hash)
    if hash == '' then
        return nil
    end
    local prev = redis.call('GET', ikey)
    if not prev then
        return nil
    end
    local h, hold = string.match(prev, '^([^:]*):(.*)$')
    if h ~= hash then
        return {'MISMATCH'}
    end
    return {'REPLAY', hold}
end

local function idem_record(ikey, hash, hold, until_ms)
    if hash ~= '' then
        redis.call('SET', ikey, hash .. ':' .. hold)
        redis.call('PEXPIREAT', ikey, until_ms)
    end
end

-- Whether a hold may proceed on its token: verified by the reserve (record ''), or the
-- gateway's record of that exact token exists: tk:<record> beside seed, the event's
-- seed key (so in the script's own slot).
local function token_recorded(seed, record)
    if record == '' then
        return true
    end
    if not string.match(record, '^%x+$') then
        return false
    end
    return redis.call('EXISTS', string.sub(seed, 1, #seed - 4) .. 'tk:' .. record) == 1
end

-- What every hold script checks first, in this order: the gateway's record of the
-- token when the reserve has not verified it (token_recorded), the event's seed, the
-- Idempotency-Key (idem_check). The reply that ends the script, or nil to go on.
local function hold_gate(seed, record, ikey, hash)
    if not token_recorded(seed, record) then
        return {'UNVERIFIED'}
    end
    if redis.call('EXISTS', seed) == 0 then
        return {'NOSEED'}
    end
    return idem_check(ikey, hash)
end

-- The last step of a seat hold (hold_seats.lua, hold_best.lua: KEYS 1-5 and ARGV 1-4, 8,
-- 9 alike), every check passed: each key of skeys held SET NX PX for the hold, then its
-- record (seats: the ids comma-joined), the buyer's entry, the taker's activity and the
-- Idempotency-Key. Returns the expiry.
local function take_seats(skeys, seats, amount, now)
    local ttl = tonumber(ARGV[3])
    local exp = now + ttl
    local keep = tonumber(ARGV[8])
    for _, k in ipairs(skeys) do
        redis.call('SET', k, ARGV[1], 'NX', 'PX', ttl)
    end
    redis.call('HSET', KEYS[2], 'buyer', ARGV[2], 'state', 'held', 'exp', exp, 'seats', seats,
               'qty', #skeys, 'created', now, 'cap', now + tonumber(ARGV[4]), 'amount', amount)
    redis.call('PEXPIREAT', KEYS[2], exp + keep)
    redis.call('ZADD', KEYS[3], exp, #skeys .. ':' .. ARGV[1])
    redis.call('ZADD', KEYS[4], 'GT', exp, ARGV[2])
    idem_record(KEYS[5], ARGV[9], ARGV[1], exp + keep)
    return exp
end

local function split(s)
    local out = {}
    for item in string.gmatch(s, '[^,]+') do
        out[#out + 1] = item
    end
    return out
end

-- Loads the hold record hkey; returns the table, or nil and a status for the caller:
-- 'GONE' when no record exists (never made, released, or lost with Redis), 'NOTFOUND'
-- when it belongs to another buyer (answered like a missing one: nothing leaks).
local function load_hold(hkey, buyer)
    local f = redis.call('HMGET', hkey, 'buyer', 'state', 'exp', 'seats', 'pool', 'qty',
                         'created', 'cap', 'amount', 'checkout', 'units')
    if not f[1] then
        return nil, 'GONE'
    end
    if f[1] ~= buyer then
        return nil, 'NOTFOUND'
    end
    if f[2] == 'returned' then
        f[3] = '0' -- given back after a refused booking (unconvert.lua): over
    end
    return {buyer = f[1], state = f[2], exp = tonumber(f[3]), seats = f[4], pool = f[5],
            qty = tonumber(f[6]), created = tonumber(f[7]), cap = tonumber(f[8]),
            amount = f[9], checkout = f[10], units = f[11]}
end

-- load_hold for the scripts acting on a hold (layout above), checking the keys given
-- are this hold's.
local function load_acting()
    local h, st = load_hold(KEYS[1], ARGV[2])
    if not h then
        return nil, st
    end
    if (h.seats or '') ~= ARGV[3] or (h.pool or '') ~= ARGV[4] or
        #KEYS ~= 6 + #split(h.seats or '') then
        return nil, 'STALE'
    end
    return h
end

local function describe(st, h)
    return {st, tostring(h.exp), h.seats or '', h.pool or '', tostring(h.qty),
            tostring(h.created), tostring(h.cap), h.amount or '0', h.checkout or '',
            h.units or ''}
end
