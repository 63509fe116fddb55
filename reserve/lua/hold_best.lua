-- Best available: picks N free seats among the candidates and holds them, in one atomic
-- step, so two buyers never pick the same seat and none guesses seat after seat. The
-- candidates are in place order; the pick is the block of N adjacent free seats (one
-- row, consecutive positions) whose ranks add up lowest, the first in place order on a
-- tie. With no such block and ARGV 7 '1', the best-ranked free seat and the N-1 free
-- seats nearest to it (fewest rows away, then fewest positions, then rank) instead.
-- The reserve sends either every seat of the section (or price level) it does not know
-- sold — a whole pass, the only one whose refusals it passes on — or a window (ARGV 12
-- set): the best blocks its snapshot believes free, up to a worst one. In a window the
-- pick must be ordered no later than that worst block (ARGV 12, 13), else the answer is
-- NOBLOCK (never INSUFFICIENT, SOLDOUT nor seats apart): then a better block may be
-- outside the window, and the reserve tries again (docs/design.md "Best available").
-- Everything else is hold_seats.lua's: token record, seed, Idempotency-Key (REPLAY,
-- MISMATCH), the buyer's limit (checked before any seat is read), the hold's keys.
-- KEYS: 1 seed, 2 hold record, 3 buyer zset, 4 active, 5 idempotency record,
--       6.. the candidate seats, in place order (section, row, position)
-- ARGV: 1 hold id, 2 buyer, 3 ttl ms, 4 max hold ms, 5 max per buyer (0 = none),
--       6 seats wanted (N), 7 '1' when seats apart may do ('0': adjacent only),
--       8 record keep ms, 9 request hash ('' = no key), 10 the token record ('' = verified),
--       11 the candidates' places, 34 digits each in KEYS order: row (6; a number of the
--       event's, 0 for a seat with no row, adjacent to none), position (6), rank (10),
--       price (12). One string rather than an ARGV each: Redis builds one Lua string, not
--       one per seat, and a place is read only when its seat is free.
--       12 a window's worst block: its ranks added up ('' = a whole pass),
--       13 its first seat (1-based, among the candidates)
-- Reply: {'OK', exp, seats (comma-joined, place order), amount[, taken]}
--        | {'NOBLOCK', free[, taken]} (no N adjacent, fewer apart not allowed; in a
--        window: no block within the bound) | {'INSUFFICIENT', free} (0 < free < N)
--        | {'SOLDOUT'} | {'LIMIT', units} | {'NOSEED'} | {'REPLAY', hold id} | {'MISMATCH'}
--        | {'UNVERIFIED'}
--        taken (windows only): the candidates found held, comma-joined 1-based indexes,
--        negative for sold ones, so the reserve's hint learns them.
-- Cost: one MGET over the candidates (in slices of 1,000) and a pass over the free ones.
-- A whole pass is linear in the section's size (the reserve leaves out the seats it
-- knows sold, and refuses to weigh more than 20,000: reserve/rsv_hold.c); a window is
-- max(64, 8N) seats or so, whatever the section's size.
local refused = hold_gate(KEYS[1], ARGV[10], KEYS[5], ARGV[9])
if refused then
    return refused
end
local now = now_ms()
local want = tonumber(ARGV[6])
local limit = tonumber(ARGV[5])
if limit > 0 then
    local have = buyer_units(KEYS[3], now)
    if have + want > limit then
        return {'LIMIT', have}
    end
end

-- The free candidates, in place order: {k = KEYS index, row, pos, rank, price}.
local free = {}
local window = (ARGV[12] or '') ~= ''
local taken = {} -- a window's candidates found held (index) or sold (-index)
local ncand = #KEYS - 5
local places = ARGV[11]
if #places ~= 34 * ncand then
    return redis.error_reply('hold_best: places do not match the candidates')
end
for lo = 1, ncand, 1000 do
    local hi = math.min(lo + 999, ncand)
    local vals = redis.call('MGET', unpack(KEYS, lo + 5, hi + 5))
    for j = 1, hi - lo + 1 do
        local c = lo + j - 1
        if vals[j] and window then
            taken[#taken + 1] = string.sub(vals[j], 1, 4) == 'sold' and -c or c
        elseif not vals[j] then
            local o = (c - 1) * 34
            free[#free + 1] = {k = c + 5, row = tonumber(string.sub(places, o + 1, o + 6)),
                               pos = tonumber(string.sub(places, o + 7, o + 12)),
                               rank = tonumber(string.sub(places, o + 13, o + 22)),
                               price = tonumber(string.sub(places, o + 23, o + 34))}
        end
    end
end
if window and #free < want then
    return {'NOBLOCK', #free, table.concat(taken, ',')}
end
if #free == 0 then
    return {'SOLDOUT'}
end
if #free < want then
    return {'INSUFFICIENT', #free}
end

-- The best block: a window of `want` seats inside a run of adjacent free ones.
local best, best_sum = nil, nil
local run, sum = 0, 0
for i, f in ipairs(free) do
    local p = free[i - 1]
    if p and f.row ~= 0 and p.row == f.row and f.pos == p.pos + 1 then
        run = run + 1
    else
        run, sum = 1, 0
    end
    sum = sum + f.rank
    if run > want then
        sum = sum - free[i - want].rank
    end
    if run >= want and (best_sum == nil or sum < best_sum) then
        best, best_sum = i - want + 1, sum
    end
end

if window then
    local bound, bound_at = tonumber(ARGV[12]), tonumber(ARGV[13])
    if not best or best_sum > bound or (best_sum == bound and free[best].k - 5 > bound_at) then
        return {'NOBLOCK', #free, table.concat(taken, ',')}
    end
end

local pick = {}
if best then
    for i = best, best + want - 1 do
        pick[#pick + 1] = free[i]
    end
elseif ARGV[7] == '1' then
    local anchor = free[1]
    for _, f in ipairs(free) do
        if f.rank < anchor.rank then
            anchor = f
        end
    end
    local function away(f)
        if f.row == 0 or anchor.row == 0 then
            return math.huge, 0
        end
        return math.abs(f.row - anchor.row), math.abs(f.pos - anchor.pos)
    end
    table.sort(free, function(a, b)
        if a == anchor or b == anchor then
            return a == anchor and b ~= anchor
        end
        local ar, ap = away(a)
        local br, bp = away(b)
        if ar ~= br then
            return ar < br
        end
        if ap ~= bp then
            return ap < bp
        end
        if a.rank ~= b.rank then
            return a.rank < b.rank
        end
        return a.k < b.k
    end)
    for i = 1, want do
        pick[i] = free[i]
    end
    table.sort(pick, function(a, b)
        return a.k < b.k
    end)
else
    return {'NOBLOCK', #free}
end

local skeys, ids, amount = {}, {}, 0
local prefix = #KEYS[1] - 4 + #'s:' -- 'os:{<event>}:seed' → 'os:{<event>}:s:<seat>'
for i, f in ipairs(pick) do
    skeys[i] = KEYS[f.k]
    ids[i] = string.sub(KEYS[f.k], prefix + 1)
    amount = amount + f.price
end
local seats = table.concat(ids, ',')
amount = string.format('%d', amount)
local exp = take_seats(skeys, seats, amount, now)
if window then
    return {'OK', exp, seats, amount, table.concat(taken, ',')}
end
return {'OK', exp, seats, amount}
