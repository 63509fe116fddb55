-- Takes a hold on one or more seats, all or nothing, in one atomic step: every seat
-- free, the buyer under the limit, then SET NX PX on each seat.
-- With an Idempotency-Key the same key and body from the same buyer answer the hold
-- taken first (REPLAY), another body MISMATCH.
-- A buyer's first hold may come with a token the reserve has not verified (ARGV 10 its
-- record's id): then it holds only if the gateway's record of that exact token exists
-- (tk:<id> beside KEYS 1, prelude.lua), else UNVERIFIED and nothing else is read or
-- written.
-- KEYS: 1 seed, 2 hold record, 3 buyer zset, 4 active, 5 idempotency record, 6.. seats
-- ARGV: 1 hold id, 2 buyer, 3 ttl ms, 4 max hold ms, 5 max per buyer (0 = none),
--       6 seats (comma-joined), 7 amount, 8 record keep ms, 9 request hash ('' = no key),
--       10 the token record that must exist: hex SHA-256 of the token ('' = verified)
-- Reply: {'OK', exp} | {'TAKEN', i, …} (1-based seat indexes, negative for a seat sold:
--        the reserve remembers those a while, rsv_avail_note_sold) | {'LIMIT', units} | {'NOSEED'}
--        | {'REPLAY', hold id} | {'MISMATCH'} | {'UNVERIFIED'}
local refused = hold_gate(KEYS[1], ARGV[10], KEYS[5], ARGV[9])
if refused then
    return refused
end
local now = now_ms()
local taken = {'TAKEN'}
for i = 6, #KEYS do
    local v = redis.call('GET', KEYS[i])
    if v then
        taken[#taken + 1] = string.sub(v, 1, 4) == 'sold' and 5 - i or i - 5
    end
end
if #taken > 1 then
    return taken
end
local n = #KEYS - 5
local limit = tonumber(ARGV[5])
if limit > 0 then
    local have = buyer_units(KEYS[3], now)
    if have + n > limit then
        return {'LIMIT', have}
    end
end
local skeys = {}
for i = 6, #KEYS do
    skeys[#skeys + 1] = KEYS[i]
end
return {'OK', take_seats(skeys, ARGV[6], ARGV[7], now)}
