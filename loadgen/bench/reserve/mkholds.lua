-- mkholds.lua — wrk script: pre-creates the holds confirm.lua confirms (not measured).
--
--   wrk … -s mkholds.lua https://127.0.0.1:PORT -- TOKENS EVENT N NTHREADS OUT
--
-- Seat i (common.lua names) is held by buyer i: token line i+1 of TOKENS, which must
-- have N lines, so every hold has its own buyer. Each thread writes one line per hold
-- it got, "hold_id<TAB>token<TAB>amount", to OUT.<tid>. When all its answers are in it
-- writes OUT.done.<tid> ("<holds> <failures>") and stops; the shell script waits for
-- those files and then ends wrk with SIGINT (wrk itself would sleep out -d).
-- Connections asking for work after the last seat get GET /healthz (answer 200; a hold
-- answers 201 or an error, never 200, which is how the two are told apart).
-- Holds are timed by seat (common.lua); span_us in RESULT runs from the first request to
-- the last answer, so RESULT ok / span is the rate of this pass — every request a
-- buyer's first, its token not yet in the reserve's cache.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(here .. "common.lua")

function setup(thread)
    common.setup(thread)
end

local tokens, event, next_seat, hi, quota, answered, made, out, out_path, fallback

function init(args)
    tokens = common.read_lines(args[1])
    event = args[2]
    local n = tonumber(args[3])
    assert(#tokens >= n, "need one token per hold")
    local lo
    lo, hi = common.range(n, tonumber(args[4]), tid)
    next_seat, quota, answered, made = lo, hi - lo, 0, 0
    out_path = args[5]
    out = assert(io.open(out_path .. "." .. tid, "w"))
    fallback = wrk.format("GET", "/healthz")
    common.init_tally()
    if quota == 0 then finish() end
end

function finish()
    out:close()
    local f = assert(io.open(out_path .. ".done." .. tid, "w"))
    f:write(string.format("%d %d\n", made, answered - made))
    f:close()
    wrk.thread:stop()
end

function request()
    if common.is_probe() then return fallback end
    if next_seat >= hi then return fallback end
    local i = next_seat
    next_seat = i + 1
    local seat = common.seat_id(i)
    common.sent(seat)
    return wrk.format("POST", "/v1/events/" .. event .. "/holds", {
        ["Authorization"] = "Bearer " .. tokens[i + 1],
        ["Content-Type"] = "application/json",
    }, '{"seats":["' .. seat .. '"]}')
end

function response(status, headers, body)
    if status == 200 or answered >= quota then return end
    answered = answered + 1
    local seat = body:match('"seats":%["([^"]+)"')
    common.received(seat)
    common.tally(status, body, 201)
    if status == 201 then
        local id = body:match('"hold_id":"([^"]+)"')
        local amount = body:match('"amount":(%d+)')
        local s, r, n = (seat or ""):match("^S(%d+)-(%d+)-(%d+)$")
        if id and s and amount then
            local i = tonumber(s) * common.ROWS * common.PER + (tonumber(r) - 1) * common.PER
                + tonumber(n) - 1
            out:write(id, "\t", tokens[i + 1], "\t", amount, "\n")
            made = made + 1
        end
    end
    if answered == quota then finish() end
end

function done(summary, latency, requests)
    common.report(summary, latency, 201)
end
