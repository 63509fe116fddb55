-- join.lua — wrk script: joins without a ticket (each one a new place in the queue).
--
--   wrk … -s join.lua https://127.0.0.1:PORT -- PATH [PROOF_FILE]
--
-- POST PATH (/q/<event>/join) with body {} and no ticket or cookie: the gateway takes a
-- new number in Redis (join.lua, INCR) and signs a ticket for it. 201 counts as success.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(here .. "common.lua")

function setup(thread)
    common.setup(thread)
end

local req

-- args[2], when given, names a file holding a DPoP proof (empty: none) sent with every
-- join (bench_gateway.sh --dpop): the gateway reads the key from it and binds the ticket.
function init(args)
    local headers = { ["Content-Type"] = "application/json" }
    if args[2] then
        local f = io.open(args[2], "r")
        local proof = f and f:read("*l")
        if f then f:close() end
        if proof and proof ~= "" then headers["DPoP"] = proof end
    end
    req = wrk.format("POST", args[1], headers, "{}")
    common.init_tally()
end

function request()
    return req
end

function response(status, headers, body)
    common.tally(status, body, 201)
end

function done(summary, latency, requests)
    common.report(summary, latency, 201)
end
