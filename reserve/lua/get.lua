-- Reads a hold for its owner.
-- KEYS: 1 hold record.  ARGV: 1 hold id, 2 buyer
-- Reply: {'OK'|'EXPIRED'|'CONVERTED', exp, seats, pool, qty, created, cap, amount,
--         checkout, units} | {'NOTFOUND'} | {'GONE'}
local h, st = load_hold(KEYS[1], ARGV[2])
if not h then
    return {st}
end
if h.state == 'converted' then
    return describe('CONVERTED', h)
end
if h.exp <= now_ms() then
    return describe('EXPIRED', h)
end
return describe('OK', h)
