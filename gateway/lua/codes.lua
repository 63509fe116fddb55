-- codes: a room's presale code batches (gw_code.h; key layout: gw_rediskeys.h).
-- KEYS: the room's keys (prelude.lua), then KEYS[12] = its batches hash, KEYS[13] = its
-- revocations bitmap.
--   ARGV = 'issue', phase, count, uses: a new batch of count codes (serials 0..count-1)
--     for phase, which must be in the room's schedule. Its codes take the next count
--     positions of the room's uses string and revocation bitmap (base). Nothing per code
--     is written: a code is derived, not stored. Returns {'issued', batch, base} |
--     {'unknown'} | {'no_phase'} | {'full', why}.
--   ARGV = 'revoke', then pairs batch, serial (serial '*': the whole batch): revokes those
--     codes. Returns {'revoked', n (codes revoked by this call), m (no such batch or
--     serial)} | {'unknown'}.
--   ARGV = 'get', batch: {'batch', meta} | {'unknown'} | {'no_batch'}.
-- A batch's meta is '<base>:<count>:<uses>:<revoked 0|1>:<phase>'.
local MAX_BATCHES, SERIALS = 255, 16777216
local phz = redis.call('HGET', K.cfg, 'phz')
if not redis.call('HGET', K.cfg, 'gen') then
    return {'unknown'}
end
local op = ARGV[1]
if op == 'issue' then
    local phase, count, uses = ARGV[2], tonumber(ARGV[3]), ARGV[4]
    local known = false
    for name in string.gmatch(phz or '', '%d+,%d+,%d+,[01],([^;]+)') do
        known = known or name == phase
    end
    if not known then
        return {'no_phase'}
    end
    local last = tonumber(redis.call('HGET', KEYS[12], 'next') or '0')
    local base = tonumber(redis.call('HGET', KEYS[12], 'serials') or '0')
    if last >= MAX_BATCHES then
        return {'full', 'a room holds at most 255 batches'}
    end
    if base + count > SERIALS then
        return {'full', 'a room holds at most 16777216 codes'}
    end
    local batch = last + 1
    redis.call('HSET', KEYS[12], 'next', batch, 'serials', base + count, batch,
               base .. ':' .. count .. ':' .. uses .. ':0:' .. phase)
    return {'issued', tostring(batch), tostring(base)}
end
if op == 'get' then
    local meta = redis.call('HGET', KEYS[12], ARGV[2])
    if not meta then
        return {'no_batch'}
    end
    return {'batch', meta}
end
-- revoke: pairs (batch, serial), serial '*' for the whole batch
local n, m = 0, 0
for i = 2, #ARGV - 1, 2 do
    local meta = redis.call('HGET', KEYS[12], ARGV[i])
    local base, count, uses, revoked, phase
    if meta then
        base, count, uses, revoked, phase = string.match(meta, '^(%d+):(%d+):(%d+):([01]):(.+)$')
    end
    local serial = tonumber(ARGV[i + 1])
    if base == nil then
        m = m + 1
    elseif ARGV[i + 1] == '*' then
        if revoked == '0' then
            redis.call('HSET', KEYS[12], ARGV[i],
                       base .. ':' .. count .. ':' .. uses .. ':1:' .. phase)
            n = n + tonumber(count)
        end
    elseif serial == nil or serial >= tonumber(count) then
        m = m + 1
    elseif redis.call('SETBIT', KEYS[13], tonumber(base) + serial, 1) == 0 then
        n = n + 1
    end
end
return {'revoked', tostring(n), tostring(m)}
