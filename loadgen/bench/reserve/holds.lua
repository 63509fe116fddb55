-- holds.lua — wrk script: seated-hold throughput on distinct seats.
--
--   wrk … -s holds.lua https://127.0.0.1:PORT -- TOKENS EVENT FIRST LAST NTHREADS
--
-- Each thread takes its own slice of the event's seats FIRST..LAST-1 (see common.lua for
-- the names) and asks for each seat exactly once: POST /v1/events/EVENT/holds
-- {"seats":["S0-1-1"]}. The Authorization token rotates through the TOKENS file (one
-- admission token a line, one buyer each: seat i goes with token i mod #TOKENS), so the
-- reserve's token cache holds many buyers at once, as in a sale. Only 201 counts as a
-- hold; each is timed by its seat (common.lua). Should a thread run out of seats it
-- sends GET /healthz instead (never a seat twice) and reports exhausted=1: the run is
-- then invalid.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(here .. "common.lua")

function setup(thread)
    common.setup(thread)
end

local tokens, event, next_seat, hi, fallback

function init(args)
    tokens = common.read_lines(args[1])
    event = args[2]
    local first, last, nthreads = tonumber(args[3]), tonumber(args[4]), tonumber(args[5])
    local lo
    lo, hi = common.range(last - first, nthreads, tid)
    next_seat, hi = first + lo, first + hi
    fallback = wrk.format("GET", "/healthz")
    common.init_tally()
end

function request()
    if common.is_probe() then return fallback end
    if next_seat >= hi then
        exhausted = 1
        return fallback
    end
    local i = next_seat
    next_seat = i + 1
    local seat = common.seat_id(i)
    common.sent(seat)
    return wrk.format("POST", "/v1/events/" .. event .. "/holds", {
        ["Authorization"] = "Bearer " .. tokens[i % #tokens + 1],
        ["Content-Type"] = "application/json",
    }, '{"seats":["' .. seat .. '"]}')
end

function response(status, headers, body)
    common.received(body:match('"seats":%["([^"]+)"'))
    common.tally(status, body, 201)
end

function done(summary, latency, requests)
    common.report(summary, latency, 201)
end
