-- advance: run by every gateway's timer (any number of gateways, no leader). Idempotent:
-- admissions accrue from the time elapsed since the last advance by anyone, so N gateways
-- pass rate_per_minute numbers in total, not N times it.
-- KEYS[1] = P, KEYS[2] = A; ARGV[1] = random seed (for the opening).
--
-- Outflow control, in order:
--   1. batches passed more than noshow_grace_seconds ago are retired: their numbers that
--      never claimed an admission are no-shows, and their slots are granted again, so the
--      claimed flow (not the passed flow) tracks the rate;
--   2. credit accrues rate_per_minute * elapsed while open, not paused, not closed, not
--      sold out (capped at one second's worth, so an empty queue banks no burst);
--   3. passes = floor(credit), at most the fans waiting, and with max_active > 0 at most
--      max_active - active - (passed numbers still inside their grace and unclaimed).
-- Returns {1, now, wm, n, claimed, active, noshows, opened, prequeue, cfg...} (cfg as
-- flat field/value pairs), or {0} when the room does not exist.
local P, A = KEYS[1], KEYS[2]
local c = load_cfg(P)
if not c then
    return {0}
end
local now = now_ms()
local st = hgetall(P .. 'st')
open_room(P, c, st, now, ARGV[1])
local wm, credit = num(st.wm, 0), num(st.credit, 0)
local last = num(st.last, now)
local inb, inc, rhi = num(st.inb, 0), num(st.inc, 0), num(st.rhi, 0)
local noshows, claimed = num(st.noshows, 0), num(st.claimed, 0)
local n = num(redis.call('GET', P .. 'n'), 0)
local rate = num(c.rate_per_minute, 0)
local cap = math.max(1, rate / 60)

local grace = num(c.noshow_grace_seconds, 20) * 1000
local back = 0
for _ = 1, 200 do
    local b = redis.call('LINDEX', P .. 'wb', 0)
    if not b then
        break
    end
    local t, lo, hi = string.match(b, '^(%d+):(%d+):(%d+)$')
    t, lo, hi = tonumber(t), tonumber(lo), tonumber(hi)
    if now - t < grace then
        break
    end
    redis.call('LPOP', P .. 'wb')
    local got = redis.call('BITCOUNT', P .. 'cb', lo, hi, 'BIT')
    local size = hi - lo + 1
    inb, inc, rhi = inb - size, inc - got, hi
    noshows = noshows + size - got
    back = back + size - got
end

local active = active_count(A, now)
local flowing = st.opened == '1' and c.paused ~= '1' and c.sold_out ~= '1' and
                    not (c.closes_at and now >= num(c.closes_at, 0))
if flowing then
    local dt = now - last
    if dt > 0 then
        credit = math.min(credit + rate * dt / 60000, cap)
    end
    credit = credit + back
    local passes = math.min(math.floor(credit), n - wm)
    local maxa = num(c.max_active, 0)
    if maxa > 0 then
        passes = math.min(passes, maxa - active - (inb - inc))
    end
    if passes > 0 then
        redis.call('RPUSH', P .. 'wb', now .. ':' .. (wm + 1) .. ':' .. (wm + passes))
        wm, credit, inb = wm + passes, credit - passes, inb + passes
    end
    credit = math.min(credit, cap)
else
    credit = 0
end
redis.call('HSET', P .. 'st', 'wm', wm, 'last', now, 'credit', credit, 'inb', inb, 'inc', inc,
           'rhi', rhi, 'noshows', noshows)
local out = {1, now, wm, n, claimed, active, noshows, num(st.opened, 0),
             redis.call('LLEN', P .. 'pre')}
for k, v in pairs(c) do
    out[#out + 1] = k
    out[#out + 1] = v
end
return out
