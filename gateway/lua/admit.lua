-- admit: a number at or below the watermark claims its admission, once.
-- KEYS: the room's keys (prelude.lua). ARGV[1] = gen (the ticket's room), ARGV[2] =
-- number, ARGV[3] = whose place (the visitor id, or the customer id of a customer's ticket,
-- gw_enqueue.h), ARGV[4] = jti to use if this is the first claim.
-- The first claim records '<iat>:<exp>:<jti>:<visitor>' under the number (iat = Redis
-- TIME, exp = iat + admission_ttl_seconds), marks the number claimed, and adds the
-- visitor to the active set until exp (the reserve lowers or ends that entry when the
-- fan's last hold ends or the fan says they are done: reserve/lua/done.lua); every later
-- claim by the same visitor returns the same record, so the same ticket always gets the
-- same admission.
--
-- A record belongs to its visitor. Should a second visitor hold the same number (two
-- tickets can only share one if Redis lost numbers that advance.lua's restore did not
-- cover: docs/design.md, invariant 13), it never gets the first visitor's record: its
-- claim is a claim of its own, recorded under '<number>:<visitor>', metered by the
-- claim bucket and max_active like any first claim (even at or below rwm), so the rate
-- and the active count see one more admission, and both fans keep the place their
-- ticket proves. A record of three fields (written before records named their visitor)
-- is answered as it always was, to whoever asks; it lapses at its exp.
--
-- Invariant 11 is enforced here, where admissions happen: every first claim takes a token
-- from the room's claim bucket, which fills at rate_per_minute while admissions flow and
-- holds at most one second's worth. So claims in any window of T seconds stay within
-- rate * T / 60 + rate / 60, however the fans poll, however many numbers no-show
-- compensation passed, across all gateways. A number that finds the bucket empty is told
-- to wait (it polls again soon) and marked as having come (K.sb), so it is not a no-show.
-- Exempt: numbers at or below rwm, let in before Redis lost its data (see advance.lua).
-- Cost: this script is Redis' whole share of a first admission (bench_admit.sh prints its
-- microseconds per call), so it reads only the fields it needs (HMGET, not HGETALL) and
-- writes the room's counters in one HSET: each redis.call costs a few microseconds.
-- Phases (gw_sched.h, prelude.lua's phase_at): the rate and max_active are those of the
-- phase in force at this claim's Redis TIME, and the claim bucket fills at each phase's
-- rate for the time that phase was in force. A phase with requires_code admits only a
-- visitor who redeemed a code for it (KEYS[12], the room's code-holders hash, visitor ->
-- phase: join.lua); a gateway that passed no KEYS[12] (it had not seen the schedule yet)
-- gets {'wait'} for such a phase, so a stale gateway errs towards waiting, never admitting.
-- Stock (prelude.lua's stock_at): while the reserve says no unit is left, a first claim
-- takes nothing and is told {'stock_out', held}: its number keeps its place (it came, so
-- it is no no-show), and claims again once units come back — held > 0 says some may.
-- Returns {'new', rec} | {'existing', rec} (rec: the caller's own record, or a legacy
-- three-field one) | {'not_yet'} | {'wait'} (the bucket is empty,
-- or a late claimer and max_active is reached) | {'stock_out', held} | {'unknown'} |
-- {'sold_out'} | {'closed'}.
local cf = redis.call('HMGET', K.cfg, 'gen', 'sold_out', 'closes_at', 'max_active',
                     'rate_per_minute', 'paused', 'admission_ttl_seconds', 'phz', 'stock_aware')
if cf[1] ~= ARGV[1] then
    return {'unknown'}
end
local c = {gen = cf[1], sold_out = cf[2], closes_at = cf[3], max_active = cf[4],
           rate_per_minute = cf[5], paused = cf[6], admission_ttl_seconds = cf[7], phz = cf[8],
           stock_aware = cf[9]}
local number, visitor = tonumber(ARGV[2]), ARGV[3]
local field = number
local rec = redis.call('HGET', K.adm, number)
if rec then
    local owner = string.match(rec, '^[^:]*:[^:]*:[^:]*:(.+)$')
    if owner == nil or owner == visitor then
        return {'existing', rec}
    end
    field = number .. ':' .. visitor
    rec = redis.call('HGET', K.adm, field)
    if rec then
        return {'existing', rec}
    end
end
local shared = field ~= number
local now = now_ms()
if c.sold_out == '1' then
    return {'sold_out'}
end
if c.closes_at and now >= num(c.closes_at, 0) then
    return {'closed'}
end
local sf = redis.call('HMGET', K.st, 'wm', 'rhi', 'inb', 'inc', 'rwm', 'ctok', 'clast', 'opened',
                      'claimed', 'slo', 'shi')
local st = {wm = sf[1], rhi = sf[2], inb = sf[3], inc = sf[4], rwm = sf[5], ctok = sf[6],
            clast = sf[7], opened = sf[8], claimed = sf[9], slo = sf[10], shi = sf[11]}
if number > num(st.wm, 0) then
    return {'not_yet'}
end
redis.call('SETBIT', K.sb, number, 1)
local stock = stock_at(c, now)
if stock and stock.left <= 0 then
    return {'stock_out', stock.held}
end
local rate, maxa, phase = rule_at(c, c.phz, now)
if phase and phase.code == '1' and
    (KEYS[12] == nil or redis.call('HGET', KEYS[12], visitor) ~= phase.name) then
    return {'wait'}
end
local rhi = num(st.rhi, 0)
-- late: a retired number, or one in the hole advance.lua skipped (in no batch either)
local late = number <= rhi or (number > num(st.slo, 0) and number <= num(st.shi, 0))
if (late or shared) and maxa > 0 then
    local pending = num(st.inb, 0) - num(st.inc, 0)
    if active_count(now) + pending >= maxa then
        return {'wait'}
    end
end
-- the room's counters, written at once below
local upd = {'claimed', num(st.claimed, 0) + 1}
if not late and not shared then -- inc counts numbers (K.cb bits), not claims
    upd[#upd + 1], upd[#upd + 2] = 'inc', num(st.inc, 0) + 1
end
if shared or number > num(st.rwm, 0) then
    local cap = math.max(1, rate / 60)
    local tok, since = math.min(cap, num(st.ctok, cap)), num(st.clast, now)
    if flowing(c, st, now) and now > since then
        tok = math.min(cap, tok + accrue(c, c.phz, since, now))
    end
    if tok < 1 then
        redis.call('HSET', K.st, 'ctok', tok, 'clast', now)
        return {'wait'}
    end
    upd[#upd + 1], upd[#upd + 2], upd[#upd + 3], upd[#upd + 4] = 'ctok', tok - 1, 'clast', now
end
local iat = math.floor(now / 1000)
local exp = iat + num(c.admission_ttl_seconds, 600)
rec = iat .. ':' .. exp .. ':' .. ARGV[4] .. ':' .. visitor
redis.call('HSET', K.adm, field, rec)
redis.call('SETBIT', K.cb, number, 1)
redis.call('HSET', K.st, unpack(upd))
redis.call('ZADD', K.active, 'GT', exp * 1000, visitor)
return {'new', rec}
