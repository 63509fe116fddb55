-- Shared by every gateway script (prepended at load time).
--
-- Every key a script touches is declared in KEYS, the same eleven keys in the same order
-- for every script (gw_rediskeys.h builds them), all with the {event} hash tag, so one event
-- lives in one hash slot and each script stays atomic under Redis Cluster too:
--   K.cfg    'os:{e}:q:cfg'   hash: the waiting room's settings (docs/api.md names; times in
--                             epoch ms) plus gen (random id of this room's life),
--                             created_ms, updated_ms
--   K.n      'os:{e}:q:n'     last queue number handed out (INCR)
--   K.st     'os:{e}:q:st'    hash: wm (watermark), last (ms of the last advance), credit
--                             (passes accrued, fractional), opened (0/1), pk (pre-queue
--                             size at the opening), inb/inc (numbers passed / claimed in
--                             batches still inside the no-show grace), rhi (highest retired
--                             number), noshows, claimed, ctok/clast (the claim bucket),
--                             rwm (numbers at or below it were let in before Redis lost
--                             its data), pseq (arrival counter of a fifo pre-queue),
--                             hlo/hhi (the hole a restore jump left, pending: advance.lua),
--                             slo/shi (the last hole skipped: its claims are late),
--                             ssold (1 once the stock set sold_out: advance.lua)
--   K.wb     'os:{e}:q:wb'    list of passed batches '<ms>:<lo>:<hi>' awaiting their
--                             no-show verdict
--   K.pre    'os:{e}:q:pre'   zset: the pre-queue, visitor -> order score (random, or the
--                             arrival counter in fifo mode). Frozen at the opening: a
--                             member's number is its rank + 1, so opening is O(1).
--   K.pl     'os:{e}:q:pl'    hash: visitor -> number, for pre-queue tickets whose
--                             pre-queue entry Redis had lost (numbered at the end)
--   K.cb     'os:{e}:q:cb'    bitmap: bit <number> set once that number claimed
--   K.sb     'os:{e}:q:sb'    bitmap: bit <number> set once that number came for its
--                             admission (claimed, or told to wait): not a no-show
--   K.adm    'os:{e}:q:adm'   hash: number -> '<iat>:<exp>:<jti>' (its one admission)
--   K.gone   'os:{e}:q:gone'  gen of a deleted room, for a day: gateways do not restore it
--   K.active 'os:{e}:active'  zset shared with reserve: visitor -> ms its activity lapses
-- "Now" is Redis TIME, so every gateway agrees on it.
local K = {cfg = KEYS[1], n = KEYS[2], st = KEYS[3], wb = KEYS[4], pre = KEYS[5],
           pl = KEYS[6], cb = KEYS[7], sb = KEYS[8], adm = KEYS[9], gone = KEYS[10],
           active = KEYS[11]}

local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function num(x, d)
    local v = tonumber(x)
    if v == nil then
        return d
    end
    return v
end

local function hgetall(key)
    local flat = redis.call('HGETALL', key)
    local out = {}
    for i = 1, #flat, 2 do
        out[flat[i]] = flat[i + 1]
    end
    return out, #flat
end

local function load_cfg()
    local c, n = hgetall(K.cfg)
    if n == 0 then
        return nil
    end
    return c
end

-- The room's phases (gw_sched.h): cfg field phz, '<starts_ms>,<rate>,<max_active>,<0|1>,<name>;...'
-- in start order. Returns the phase in force at t (the last one started by then) as
-- {start, rate, maxa, code ('0'|'1'), name}, or nil before the first (or without a
-- schedule: the room's own rate_per_minute and max_active rule), and when the next starts.
local function phase_at(phz, t)
    local cur, nxt = nil, nil
    if not phz or phz == '' then
        return nil, nil
    end
    for a, r, m, c, name in string.gmatch(phz, '(%d+),(%d+),(%d+),([01]),([^;]+)') do
        a = tonumber(a)
        if a <= t then
            cur = {start = a, rate = tonumber(r), maxa = tonumber(m), code = c, name = name}
        elseif nxt == nil then
            nxt = a
        end
    end
    return cur, nxt
end

-- The rate and max_active in force at t: the phase's, or the room's own.
local function rule_at(c, phz, t)
    local p = phase_at(phz, t)
    if p then
        return p.rate, p.maxa, p
    end
    return num(c.rate_per_minute, 0), num(c.max_active, 0), nil
end

-- Admissions accrued over (since, now] at the rate of each phase in force in turn, so a
-- gateway that last ticked before a transition never credits the new phase's time at
-- the old phase's rate, nor the other way round.
local function accrue(c, phz, since, now)
    local total, t = 0, since
    while t < now do
        local rate = rule_at(c, phz, t)
        local _, nxt = phase_at(phz, t)
        local stop = now
        if nxt and nxt < now then
            stop = nxt
        end
        total = total + rate * (stop - t) / 60000
        t = stop
    end
    return total
end

-- The event's stock as the reserve last published it (reserve/rsv_stock.c: the hash
-- 'os:{e}:stock', fields left, held, at; read here without being declared in KEYS, as
-- the reserve's scripts read token records, since the gateway's Redis user may only read
-- it: docs/operations.md), or nil when unknown: the room is not stock_aware, nothing was
-- published, or the last publication is older than STOCK_STALE_MS (a reserve that stopped
-- publishing must not hold a room shut). left = units neither sold nor in a live hold,
-- held = units in live holds, both exact at the reserve's read, at most one publication
-- interval old (docs/design.md, "A queue that knows the stock").
local STOCK_STALE_MS = 5000
local function stock_at(c, now)
    if c.stock_aware == '0' then
        return nil
    end
    local s = redis.call('HMGET', string.sub(K.cfg, 1, -6) .. 'stock', 'left', 'held', 'at')
    local left, held, at = tonumber(s[1]), tonumber(s[2]), tonumber(s[3])
    if left == nil or held == nil or at == nil or now - at > STOCK_STALE_MS then
        return nil
    end
    return {left = left, held = held}
end

-- How many more fans the stock leaves room for (advance.lua caps its passes with it, less
-- the numbers passed and not yet claimed): the units left, plus the share of admitted fans
-- who never come (the room's no-show share so far, at most a half), less the fans still
-- choosing — admitted within the last stock_decide_seconds (their active entry, written
-- at the claim with exp = claim + admission_ttl_seconds, is that recent). A fan who holds
-- within that time is counted twice (their units left the stock too): the cap errs towards
-- waiting, for at most stock_decide_seconds, never towards admitting fans to nothing.
local function stock_room(c, stock, now, noshows, claimed)
    local share = 0
    if noshows + claimed > 0 then
        share = math.min(0.5, noshows / (noshows + claimed))
    end
    local ttl = num(c.admission_ttl_seconds, 600) * 1000
    local recent = now + ttl - num(c.stock_decide_seconds, 60) * 1000
    local choosing = redis.call('ZCOUNT', K.active, '(' .. recent, '+inf')
    return math.ceil(stock.left * (1 + share)) - choosing
end

-- What every join reads and checks first (join.lua, join_batch.lua): the room's join
-- settings (HMGET of only those fields) and now, or the reply that refuses the whole call
-- ({'unknown'}, {'sold_out'} — set by the operator, or nothing left in the stock —,
-- {'closed'}, {'not_open', prequeue_at}).
-- The phase a join is placed under (gw_sched.h): the one in force at now, or at the
-- opening for a join before it (the pre-queue's fans are let in from then). Without a code
-- (coded false), a join whose phase requires one is refused ({'code_required', name}):
-- join.lua with a code checks it against that phase itself (c.phase).
local function join_gate(coded)
    local cf = redis.call('HMGET', K.cfg, 'gen', 'sold_out', 'closes_at', 'prequeue_at',
                          'opens_at', 'mode', 'max_prequeue', 'phz', 'stock_aware')
    if not cf[1] then
        return nil, nil, {'unknown'}
    end
    local c = {gen = cf[1], sold_out = cf[2], closes_at = cf[3], prequeue_at = cf[4],
               opens_at = cf[5], mode = cf[6], max_prequeue = cf[7], phz = cf[8],
               stock_aware = cf[9]}
    if c.sold_out == '1' then
        return nil, nil, {'sold_out'}
    end
    local now = now_ms()
    local stock = stock_at(c, now)
    if stock and stock.left <= 0 then -- nothing left to buy: no new place (stock_at)
        return nil, nil, {'sold_out'}
    end
    if c.closes_at and now >= num(c.closes_at, 0) then
        return nil, nil, {'closed'}
    end
    if c.prequeue_at and now < num(c.prequeue_at, 0) then
        return nil, nil, {'not_open', c.prequeue_at}
    end
    c.phase = phase_at(c.phz, math.max(now, num(c.opens_at, 0)))
    if not coded and c.phase and c.phase.code == '1' then
        return nil, nil, {'code_required', c.phase.name}
    end
    return c, now, nil
end

-- Opens the room once now >= opens_at: the pre-queue (a zset ordered by each member's
-- random score, drawn at its join, or by arrival in fifo mode) is frozen and its members
-- own numbers 1..k by rank; everyone after joins FIFO from k+1. O(1) whatever k is: no
-- member is touched (lookup.lua reads a member's rank when the fan next polls).
-- Idempotent: the first caller past opens_at does it.
local function open_room(c, st, now)
    if st.opened == '1' or now < num(c.opens_at, 0) then
        return
    end
    local k = redis.call('ZCARD', K.pre)
    local n = math.max(k, num(redis.call('GET', K.n), 0))
    redis.call('SET', K.n, n)
    redis.call('HSET', K.st, 'opened', 1, 'pk', k, 'last', now, 'credit', 0)
    st.opened, st.pk, st.last, st.credit = '1', tostring(k), now, '0'
end

-- True while admissions flow: open, not paused, not sold out, not closed.
local function flowing(c, st, now)
    return st.opened == '1' and c.paused ~= '1' and c.sold_out ~= '1' and
               not (c.closes_at and now >= num(c.closes_at, 0))
end

-- Drops lapsed shoppers (score <= now) and returns how many are still active.
local function active_count(now)
    redis.call('ZREMRANGEBYSCORE', K.active, '-inf', now)
    return redis.call('ZCARD', K.active)
end
