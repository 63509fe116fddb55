-- settings: create/replace (PUT) or change (PATCH) a waiting room's settings.
-- KEYS: the room's keys (prelude.lua); ARGV[1] = 'put' | 'patch', ARGV[2] = a new random gen (used on creation),
-- then field/value pairs already validated one by one by the gateway ('' = unset).
-- Checks what depends on several fields (prequeue_at <= opens_at < closes_at) against
-- the merged result, so concurrent PATCHes of different fields cannot combine into an
-- invalid room. Returns {'created'|'replaced'|'patched', cfg pairs...} |
-- {'unknown'} (PATCH of a missing room) | {'invalid', message}.
local mode = ARGV[1]
local cur = load_cfg()
if mode == 'patch' and not cur then
    return {'unknown'}
end
local new = {}
if mode == 'patch' then
    for k, v in pairs(cur) do
        new[k] = v
    end
end
for i = 3, #ARGV, 2 do
    if ARGV[i + 1] == '' then
        new[ARGV[i]] = nil
    else
        new[ARGV[i]] = ARGV[i + 1]
    end
end
local pre, opens, closes = tonumber(new.prequeue_at), tonumber(new.opens_at),
                           tonumber(new.closes_at)
if pre and not opens then
    return {'invalid', 'prequeue_at needs opens_at'}
end
if pre and pre > opens then
    return {'invalid', 'prequeue_at must not be after opens_at'}
end
if opens and closes and closes <= opens then
    return {'invalid', 'closes_at must be after opens_at'}
end
if closes and new.phz then
    for a in string.gmatch(new.phz, '(%d+),[^;]*') do
        if tonumber(a) >= closes then
            return {'invalid', 'every phase must start before closes_at'}
        end
    end
end
local now = now_ms()
new.gen = (cur and cur.gen) or ARGV[2]
new.created_ms = (cur and cur.created_ms) or tostring(now)
new.updated_ms = tostring(now)
local flat = {}
for k, v in pairs(new) do
    flat[#flat + 1] = k
    flat[#flat + 1] = v
end
redis.call('DEL', K.cfg)
redis.call('HSET', K.cfg, unpack(flat))
if not cur then
    redis.call('DEL', K.gone)
end
local outcome = 'patched'
if mode == 'put' then
    outcome = cur and 'replaced' or 'created'
end
table.insert(flat, 1, outcome)
return flat
