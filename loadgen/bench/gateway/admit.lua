-- admit.lua — wrk script: every queue ticket polled exactly once, each poll a first
-- admission (Redis admit script + an ES256 token signed) — for bench_admit.sh.
--
--   wrk … -s admit.lua https://127.0.0.1:PORT -- PATH TICKETS THREADS
--
-- Thread k takes tickets k, k+THREADS, … of the TICKETS file, each once; once they are
-- spent it polls /healthz (wrk cannot stop a run early), so the run must be short enough
-- for the tickets to last. A 200 whose body says "admitted" counts as success (it is
-- tallied as 200; any other 200 as 299).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(here .. "common.lua")

function setup(thread)
    common.setup(thread)
end

local reqs, i, tail

function init(args)
    local path, tickets, nthreads = args[1], common.read_lines(args[2]), tonumber(args[3])
    reqs = {}
    for k, t in ipairs(tickets) do
        if (k - 1) % nthreads == tid then
            reqs[#reqs + 1] = wrk.format("GET", path, { ["Authorization"] = "Bearer " .. t })
        end
    end
    tail = wrk.format("GET", "/healthz")
    i = 0
    common.init_tally()
end

function request()
    i = i + 1
    if i > #reqs then
        return tail
    end
    return reqs[i]
end

function response(status, headers, body)
    if status == 200 and not string.find(body or "", '"admitted"', 1, true) then
        status = 299
    end
    common.tally(status, body, 200)
end

function done(summary, latency, requests)
    common.report(summary, latency, 200)
end
