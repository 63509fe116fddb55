-- Shared by every gateway script (prepended at load time). Key layout, one hash slot per
-- event ({event} tag), so each script stays atomic under Redis Cluster too:
--   P = 'os:{<event>}:q:'   prefix passed by the caller as KEYS[1]
--   P..'cfg'   hash: the waiting room's settings (API.md names; times in epoch ms)
--              plus gen (random id of this room's life), created_ms, updated_ms
--   P..'n'     last queue number handed out (INCR)
--   P..'st'    hash: wm (watermark), last (ms of the last advance), credit (admissions
--              accrued, fractional), opened (0/1), inb/inc (numbers passed / claimed in
--              batches still inside the no-show grace), rhi (highest retired number),
--              noshows, claimed
--   P..'wb'    list of passed batches '<ms>:<lo>:<hi>' awaiting their no-show verdict
--   P..'pre'   list: the pre-queue in arrival order (visitor ids), until the opening
--   P..'pn'    hash: visitor -> number given to a pre-queue member at the opening
--   P..'cb'    bitmap: bit <number> set once that number claimed its admission
--   P..'adm'   hash: number -> '<iat>:<exp>:<jti>' (the one admission of that number)
--   A = 'os:{<event>}:active'  zset shared with reserve: visitor -> ms its activity lapses
-- "Now" is Redis TIME, so every gateway agrees on it.
local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function num(x, d)
    local v = tonumber(x)
    if v == nil then
        return d
    end
    return v
end

local function hgetall(key)
    local flat = redis.call('HGETALL', key)
    local out = {}
    for i = 1, #flat, 2 do
        out[flat[i]] = flat[i + 1]
    end
    return out, #flat
end

local function load_cfg(P)
    local c, n = hgetall(P .. 'cfg')
    if n == 0 then
        return nil
    end
    return c
end

-- Opens the room once now >= opens_at: the pre-queue gets numbers 1..k, shuffled
-- uniformly (Fisher-Yates, seeded by the caller's random seed) unless mode is fifo, and
-- everyone after joins FIFO from k+1. Idempotent: the first caller past opens_at does it.
local function open_room(P, c, st, now, seed)
    if st.opened == '1' or now < num(c.opens_at, 0) then
        return
    end
    local pre = redis.call('LRANGE', P .. 'pre', 0, -1)
    local k = #pre
    if c.mode ~= 'fifo' and k > 1 then
        math.randomseed(num(seed, 1))
        for i = k, 2, -1 do
            local j = math.random(i)
            pre[i], pre[j] = pre[j], pre[i]
        end
    end
    for i = 1, k, 500 do
        local args = {}
        for j = i, math.min(k, i + 499) do
            args[#args + 1] = pre[j]
            args[#args + 1] = j
        end
        redis.call('HSET', P .. 'pn', unpack(args))
    end
    redis.call('DEL', P .. 'pre')
    redis.call('SET', P .. 'n', k)
    redis.call('HSET', P .. 'st', 'opened', 1, 'last', now, 'wm', 0, 'credit', 0)
    st.opened, st.last, st.wm, st.credit = '1', now, '0', '0'
end

-- Drops lapsed shoppers (score <= now) and returns how many are still active.
local function active_count(A, now)
    redis.call('ZREMRANGEBYSCORE', A, '-inf', now)
    return redis.call('ZCARD', A)
end
