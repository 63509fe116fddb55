-- confirm.lua — wrk script: confirm throughput, each pre-created hold confirmed once.
--
--   wrk … -s confirm.lua https://127.0.0.1:PORT -- HOLDS NTHREADS
--
-- HOLDS has "hold_id<TAB>token<TAB>amount" lines (mkholds.lua). Thread t takes lines
-- t, t+NTHREADS, … and sends POST /v1/holds/<id>/confirm with the hold owner's token,
-- its own Idempotency-Key and the hold's amount. Only 201 counts (a 200 would be a
-- replay); each confirm is timed by the hold id its answer names (common.lua). A thread that runs out of holds sends GET /healthz and reports exhausted=1:
-- the run is then invalid (the shell script sizes HOLDS to outlast the run).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(here .. "common.lua")

function setup(thread)
    common.setup(thread)
end

local mine, next_i, fallback

function init(args)
    local lines = common.read_lines(args[1])
    local nthreads = tonumber(args[2])
    mine = {}
    for k = tid + 1, #lines, nthreads do
        local id, token, amount = lines[k]:match("^([^\t]+)\t([^\t]+)\t(%d+)$")
        assert(id, "bad line in " .. args[1])
        mine[#mine + 1] = { id, token, amount }
    end
    next_i = 1
    fallback = wrk.format("GET", "/healthz")
    common.init_tally()
end

function request()
    if common.is_probe() then return fallback end
    local h = mine[next_i]
    if h == nil then
        exhausted = 1
        return fallback
    end
    next_i = next_i + 1
    common.sent(h[1])
    return wrk.format("POST", "/v1/holds/" .. h[1] .. "/confirm", {
        ["Authorization"] = "Bearer " .. h[2],
        ["Content-Type"] = "application/json",
        ["Idempotency-Key"] = "bench-" .. h[1],
    }, '{"payment":{"amount":' .. h[3] .. ',"currency":"EUR","source":"tok_visa"}}')
end

function response(status, headers, body)
    common.received(body:match('"hold_id":"([^"]+)"'))
    common.tally(status, body, 201)
end

function done(summary, latency, requests)
    common.report(summary, latency, 201)
end
