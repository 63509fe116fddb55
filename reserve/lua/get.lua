-- Reads a hold for its owner. Keys of one event, all under the prefix.
-- KEYS: 1 hold record.  ARGV: 1 prefix, 2 hold id, 3 buyer
-- Reply: {'OK'|'EXPIRED'|'CONVERTED', exp, seats, pool, qty, created, cap, amount,
--         checkout, units} | {'NOTFOUND'} | {'GONE'}
local h, st = load_hold(ARGV[1], ARGV[2], ARGV[3])
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
