-- admit: a number at or below the watermark claims its admission, once.
-- KEYS[1] = P, KEYS[2] = A; ARGV[1] = gen (the ticket's room), ARGV[2] = number,
-- ARGV[3] = visitor id, ARGV[4] = jti to use if this is the first claim.
-- The first claim records '<iat>:<exp>:<jti>' (iat = Redis TIME, exp = iat +
-- admission_ttl_seconds), marks the number claimed, and adds the visitor to the active
-- set until exp; every later claim returns the same record, so the same ticket always
-- gets the same admission.
-- Returns {'new', rec} | {'existing', rec} | {'not_yet'} | {'wait'} (a late claimer and
-- max_active is reached) | {'unknown'} | {'sold_out'} | {'closed'}.
local P, A = KEYS[1], KEYS[2]
local c = load_cfg(P)
if not c or c.gen ~= ARGV[1] then
    return {'unknown'}
end
local number = tonumber(ARGV[2])
local rec = redis.call('HGET', P .. 'adm', number)
if rec then
    return {'existing', rec}
end
local now = now_ms()
if c.sold_out == '1' then
    return {'sold_out'}
end
if c.closes_at and now >= num(c.closes_at, 0) then
    return {'closed'}
end
local st = hgetall(P .. 'st')
if number > num(st.wm, 0) then
    return {'not_yet'}
end
local rhi, maxa = num(st.rhi, 0), num(c.max_active, 0)
local late = number <= rhi
if late and maxa > 0 then
    local pending = num(st.inb, 0) - num(st.inc, 0)
    if active_count(A, now) + pending >= maxa then
        return {'wait'}
    end
end
local iat = math.floor(now / 1000)
local exp = iat + num(c.admission_ttl_seconds, 600)
rec = iat .. ':' .. exp .. ':' .. ARGV[4]
redis.call('HSET', P .. 'adm', number, rec)
redis.call('SETBIT', P .. 'cb', number, 1)
if not late then
    redis.call('HINCRBY', P .. 'st', 'inc', 1)
end
redis.call('HINCRBY', P .. 'st', 'claimed', 1)
redis.call('ZADD', A, 'GT', exp * 1000, ARGV[3])
return {'new', rec}
