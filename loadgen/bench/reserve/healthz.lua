-- healthz.lua — wrk script: GET /healthz over the same kind of connections as holds.lua
-- (TLS, keep-alive), the reserve's own floor: no token, no Redis, no JSON body. Put next
-- to the hold rate it says how much of a hold's cost is transport (TLS, HTTP) rather
-- than the hold itself.
--
--   wrk … -s healthz.lua https://127.0.0.1:PORT
--
-- Answers carry nothing to match a request by, so RESULT's own p50/p99 stay 0; only
-- the rate (ok = 200s) and wrk's own percentiles are meaningful here.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(here .. "common.lua")

function setup(thread)
    common.setup(thread)
end

local req

function init(args)
    req = wrk.format("GET", "/healthz")
    common.init_tally()
end

function request()
    return req
end

function response(status, headers, body)
    common.received(nil)
    common.tally(status, body, 200)
end

function done(summary, latency, requests)
    common.report(summary, latency, 200)
end
