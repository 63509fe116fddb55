-- Shared by every reserve script (prepended at load time). Key layout, one hash slot
-- per event ({event} tag), so each script is atomic under Redis Cluster too:
--   P = 'os:{<event>}:'      prefix passed by the caller
--   P..'seed'                present once the event's counters and sold seats are loaded
--   P..'s:'..seat            seat: hold id (PX = hold expiry) or 'sold:<checkout>' (no TTL)
--   P..'h:'..hold            hold record (hash), kept hold_record_keep after expiry
--   P..'b:'..buyer           buyer's units: zset member '<units>:<hold>', score = expiry
--                            ('+inf' once bought)
--   P..'p:'..pool            pool units available (never below zero)
--   P..'pe:'..pool           pool holds by expiry: member '<qty>:<hold>', score = expiry
--   P..'pn:'..pool           last pool unit number handed to a booking
--   P..'active'              shoppers the gateway admitted: member = visitor, score = when
--                            their activity lapses; a hold keeps its taker active until it
--                            expires, a confirmation or release ends the activity
-- Expiry is decided here, at read time, against Redis TIME: a hold is alive iff
-- now < exp. Nothing depends on a sweeper.
local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function units_of(member)
    return tonumber(string.match(member, '^(%d+):'))
end

-- Returns the quantity of expired holds of a pool to the pool (bounded work per call).
local function reclaim_pool(P, pool, now)
    local ez = P .. 'pe:' .. pool
    local expired = redis.call('ZRANGEBYSCORE', ez, '-inf', now, 'LIMIT', 0, 500)
    if #expired == 0 then
        return
    end
    local total = 0
    for _, m in ipairs(expired) do
        total = total + units_of(m)
        redis.call('ZREM', ez, m)
    end
    redis.call('INCRBY', P .. 'p:' .. pool, total)
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

local function split(s)
    local out = {}
    for item in string.gmatch(s, '[^,]+') do
        out[#out + 1] = item
    end
    return out
end

-- Loads a hold record; returns the table, or nil and a status for the caller:
-- 'GONE' when no record exists (never made, released, or lost with Redis), 'NOTFOUND'
-- when it belongs to another buyer (answered like a missing one: nothing leaks).
local function load_hold(P, hold, buyer)
    local f = redis.call('HMGET', P .. 'h:' .. hold, 'buyer', 'state', 'exp', 'seats', 'pool',
                         'qty', 'created', 'cap', 'amount', 'checkout', 'units')
    if not f[1] then
        return nil, 'GONE'
    end
    if f[1] ~= buyer then
        return nil, 'NOTFOUND'
    end
    return {buyer = f[1], state = f[2], exp = tonumber(f[3]), seats = f[4], pool = f[5],
            qty = tonumber(f[6]), created = tonumber(f[7]), cap = tonumber(f[8]),
            amount = f[9], checkout = f[10], units = f[11]}
end

local function describe(st, h)
    return {st, tostring(h.exp), h.seats or '', h.pool or '', tostring(h.qty),
            tostring(h.created), tostring(h.cap), h.amount or '0', h.checkout or '',
            h.units or ''}
end
