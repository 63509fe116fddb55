-- join.lua — wrk script: joins without a ticket (each one a new place in the queue).
--
--   wrk … -s join.lua https://127.0.0.1:PORT -- PATH
--
-- POST PATH (/q/<event>/join) with body {} and no ticket or cookie: the gateway takes a
-- new number in Redis (join.lua, INCR) and signs a ticket for it. 201 counts as success.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(here .. "common.lua")

function setup(thread)
    common.setup(thread)
end

local req

function init(args)
    req = wrk.format("POST", args[1], { ["Content-Type"] = "application/json" }, "{}")
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
