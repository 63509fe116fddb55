-- status.lua — wrk script: queue-status polls with valid tickets.
--
--   wrk … -s status.lua https://127.0.0.1:PORT -- PATH TICKETS [close]
--
-- GET PATH (/q/<event>/status) with `Authorization: Bearer <ticket>`, the ticket
-- rotating through the TICKETS file (one a line, from real joins), each thread starting
-- at its own offset. The requests are formatted once in init(), so the per-request Lua
-- cost is a table lookup. `close` adds `Connection: close`: every request then costs a
-- new TCP connection and a full TLS handshake (wrk does not resume sessions), which is
-- how new TLS connections/s are measured. 200 counts as success.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(here .. "common.lua")

function setup(thread)
    common.setup(thread)
end

local reqs, i

function init(args)
    local path, tickets, close = args[1], common.read_lines(args[2]), args[3] == "close"
    reqs = {}
    for k, t in ipairs(tickets) do
        local h = { ["Authorization"] = "Bearer " .. t }
        if close then h["Connection"] = "close" end
        reqs[k] = wrk.format("GET", path, h)
    end
    assert(#reqs > 0, "no tickets in " .. args[2])
    i = (tid * 7919) % #reqs
    common.init_tally()
end

function request()
    i = i % #reqs + 1
    return reqs[i]
end

function response(status, headers, body)
    common.tally(status, body, 200)
end

function done(summary, latency, requests)
    common.report(summary, latency, 200)
end
