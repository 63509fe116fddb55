-- advance: run by every gateway's timer (any number of gateways, no leader). Idempotent:
-- admissions accrue from the time elapsed since the last advance by anyone, so N gateways
-- pass rate_per_minute numbers in total, not N times it.
-- KEYS: the room's keys (prelude.lua).
-- ARGV: what this gateway knows of the room, so that Redis losing its data (FLUSHALL, a
-- failover to a lagging replica, a restart from an old file) loses no fan's place:
--   [1] gen of the room as this gateway last saw it ('' = none), [2] the highest
--   watermark it saw, [3] the highest queue number it saw (issued, or in a verified
--   ticket), [4] admissions claimed, [5] opened (0/1), [6] the restore jump (numbers
--   other gateways may have handed out that this one has not seen yet:
--   gw_watermark_restore_jump), [7..] the room's settings as field/value pairs ('' = none).
-- Recovery, all idempotent (max of what any gateway knew):
--   * the room's hash is missing but a gateway holds it (and no tombstone says the room
--     was deleted): its settings are written back, gen included, so every ticket still
--     verifies and the operator's settings are intact;
--   * the watermark and the claimed count never go below what a gateway saw; numbers at
--     or below a watermark restored this way (rwm) were let in before the loss, so their
--     claims after it are not new admissions;
--   * a last number below what this gateway saw proves Redis lost numbers (q:n only
--     grows otherwise), and others may have handed out more since this gateway last
--     learned q:n: numbering resumes past the highest it saw plus the jump, so no number
--     is handed out twice (docs/design.md, invariant 13). The first gateway to notice
--     jumps; the others then find q:n at or above what they saw and leave it. The jump
--     leaves a hole (hlo, hhi]: each later advance whose gateway saw numbers inside it
--     (before the jump) raises hlo to them, and the rest is skipped (step 4).
--
-- Outflow control, in order:
--   1. batches passed more than noshow_grace_seconds ago are retired: their numbers whose
--      fans never came for the admission are no-shows, and their slots are passed again,
--      so the claimed flow (not the passed flow) tracks the rate;
--   2. credit accrues rate_per_minute * elapsed (each phase's rate for its share of the
--      elapsed time; prelude.lua's accrue) while open, not paused, not closed, not
--      sold out (capped at one second's worth, so an empty queue banks no burst);
--   3. passes = floor(credit), at most the fans waiting, and with max_active > 0 at most
--      max_active - active - (passed numbers still inside their grace and unclaimed);
--      with the event's stock known (prelude.lua's stock_at), nothing passes while no unit
--      is left, and at most stock_room - (the same unclaimed numbers) otherwise. Once
--      every unit is booked and none held, the room's sold_out is set (once per room).
--   4. while a hole is pending, passes stop at hlo; once the watermark reaches it, it
--      moves to hhi at once, without credit and without a batch: no gateway that has
--      ticked since the loss handed out those numbers. A fan of one that has not yet is
--      let in with the rest (its place was ahead of hhi anyway) and claims as a late
--      claimer (admit.lua: slo/shi), so its claim is still metered.
-- Claims themselves are metered by admit.lua's claim bucket (invariant 11).
-- Returns {1, now, wm, n, claimed, active, noshows, opened, prequeue, restored, left,
-- held, cfg...} (left and held: the stock as stock_at read it, -1 when unknown; cfg as
-- flat field/value pairs), or {0} when the room does not exist.
local gen = ARGV[1]
local c = load_cfg()
local now = now_ms()
local restored = 0
if not c then
    if gen == '' or #ARGV < 8 or redis.call('GET', K.gone) == gen then
        return {0}
    end
    local flat = {}
    for i = 7, #ARGV do
        flat[#flat + 1] = ARGV[i]
    end
    redis.call('HSET', K.cfg, unpack(flat))
    redis.call('HSET', K.st, 'last', now, 'credit', 0)
    c = load_cfg()
    restored = 1
end
local st = hgetall(K.st)
if c.gen == gen then
    local wmf, nf, clf = num(ARGV[2], 0), num(ARGV[3], 0), num(ARGV[4], 0)
    if ARGV[5] == '1' and st.opened ~= '1' then
        st.opened = '1'
        redis.call('HSET', K.st, 'opened', 1)
    end
    if num(st.wm, 0) < wmf then
        st.wm, st.rwm = wmf, math.max(num(st.rwm, 0), wmf)
        redis.call('HSET', K.st, 'wm', st.wm, 'rwm', st.rwm)
    end
    if num(st.claimed, 0) < clf then
        st.claimed = clf
        redis.call('HSET', K.st, 'claimed', clf)
    end
    local jump = math.max(0, math.floor(num(ARGV[6], 0)))
    if num(redis.call('GET', K.n), 0) < nf then
        redis.call('SET', K.n, nf + jump)
        if jump > 0 then
            st.hlo, st.hhi = nf, nf + jump
            redis.call('HSET', K.st, 'hlo', st.hlo, 'hhi', st.hhi)
        end
    elseif nf > num(st.hlo, 0) and nf < num(st.hhi, 0) then
        -- below hhi, what this gateway saw predates the jump (q:n has been past hhi
        -- since): numbers up to nf were handed out, so fans may hold them
        st.hlo = nf
        redis.call('HSET', K.st, 'hlo', nf)
    end
end
open_room(c, st, now)
local wm, credit = num(st.wm, 0), num(st.credit, 0)
local last = num(st.last, now)
local inb, inc, rhi = num(st.inb, 0), num(st.inc, 0), num(st.rhi, 0)
local noshows, claimed = num(st.noshows, 0), num(st.claimed, 0)
local n = num(redis.call('GET', K.n), 0)
local rate, maxa = rule_at(c, c.phz, now) -- the phase in force (gw_sched.h), or the room's
local cap = math.max(1, rate / 60)

local grace = num(c.noshow_grace_seconds, 20) * 1000
local back = 0
for _ = 1, 200 do
    local b = redis.call('LINDEX', K.wb, 0)
    if not b then
        break
    end
    local t, lo, hi = string.match(b, '^(%d+):(%d+):(%d+)$')
    t, lo, hi = tonumber(t), tonumber(lo), tonumber(hi)
    if now - t < grace then
        break
    end
    redis.call('LPOP', K.wb)
    local came = redis.call('BITCOUNT', K.sb, lo, hi, 'BIT')
    local got = redis.call('BITCOUNT', K.cb, lo, hi, 'BIT')
    local size = hi - lo + 1
    inb, inc, rhi = inb - size, inc - got, hi
    noshows = noshows + size - came
    back = back + size - came
end

local active = active_count(now)
local stock = stock_at(c, now)
if stock and stock.left <= 0 and stock.held <= 0 and c.sold_out ~= '1' and st.ssold ~= '1' then
    -- every unit booked, none held: only a refund could bring one back, so the room is
    -- sold out as if the operator had said so (durable, shown as such; the operator may
    -- reopen it: this happens once per room, ssold)
    c.sold_out, c.updated_ms, st.ssold = '1', tostring(now), '1'
    redis.call('HSET', K.cfg, 'sold_out', 1, 'updated_ms', now)
    redis.call('HSET', K.st, 'ssold', 1)
end
if flowing(c, st, now) and not (stock and stock.left <= 0) then
    local dt = now - last
    if dt > 0 then
        credit = math.min(credit + accrue(c, c.phz, last, now), cap)
    end
    credit = credit + back
    local passes = math.min(math.floor(credit), n - wm)
    if maxa > 0 then
        passes = math.min(passes, maxa - active - (inb - inc))
    end
    if stock then
        passes = math.min(passes, stock_room(c, stock, now, noshows, claimed) - (inb - inc))
    end
    local hlo, hhi = num(st.hlo, 0), num(st.hhi, 0)
    if hhi > 0 then
        passes = math.min(passes, hlo - wm)
    end
    if passes > 0 then
        redis.call('RPUSH', K.wb, now .. ':' .. (wm + 1) .. ':' .. (wm + passes))
        wm, credit, inb = wm + passes, credit - passes, inb + passes
    end
    if hhi > 0 and wm >= hlo then
        wm = math.max(wm, hhi)
        redis.call('HSET', K.st, 'slo', hlo, 'shi', hhi)
        redis.call('HDEL', K.st, 'hlo', 'hhi')
    end
    credit = math.min(credit, cap)
else
    credit = 0
end
redis.call('HSET', K.st, 'wm', wm, 'last', now, 'credit', credit, 'inb', inb, 'inc', inc,
           'rhi', rhi, 'noshows', noshows)
local pre = 0
if st.opened ~= '1' then
    pre = redis.call('ZCARD', K.pre)
end
local out = {1, now, wm, n, claimed, active, noshows, num(st.opened, 0), pre, restored,
             stock and stock.left or -1, stock and stock.held or -1}
for k, v in pairs(c) do
    out[#out + 1] = k
    out[#out + 1] = v
end
return out
