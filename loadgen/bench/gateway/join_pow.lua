-- join_pow.lua — wrk script: joins of a room with proof of work, as a fan makes them.
--
--   wrk … -s join_pow.lua https://127.0.0.1:PORT -- PATH [PROOFS THREADS [HEADER]]
--
-- Without PROOFS each join costs two requests, as an API client makes them: GET
-- /q/<event>/challenge, then POST PATH (/q/<event>/join) with `Onsale-Pow:
-- <challenge>.0`. bench_gateway.sh --pow runs the gateway at difficulty 0, so the nonce
-- "0" always solves it and the client does no work, while the gateway still does all of
-- its own: the challenge (random bytes, HMAC), then the check (HMAC, SHA-256) and
-- join.lua with the proof's used-mark. Challenge answers are not tallied: 201 is
-- success, and the gateway's CPU per 201 is the CPU per join, challenge included.
--
-- With PROOFS (one solved "<challenge>.<nonce>" a line, proofs.py) each join is one POST
-- with the next proof of the thread's share (line k to thread (k - 1) mod THREADS): the
-- join alone, as a browser makes it with the challenge its queue page came with. HEADER
-- names another header for the lines (Onsale-Enqueue: bench_gateway.sh --enqueue, one
-- customer's enqueue token a line, enqueue_tokens.py).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(here .. "common.lua")

function setup(thread)
    common.setup(thread)
end

local path, challenge_req, pending, made, m

function init(args)
    path = args[1]
    challenge_req = wrk.format("GET", (path:gsub("/join$", "/challenge")))
    pending = {}
    made, m = {}, 0
    if args[2] then
        local nthreads, header = tonumber(args[3]), args[4] or "Onsale-Pow"
        for k, proof in ipairs(common.read_lines(args[2])) do
            if (k - 1) % nthreads == tid then
                made[#made + 1] = wrk.format("POST", path, { ["Content-Type"] = "application/json",
                    [header] = proof }, "{}")
            end
        end
    end
    common.init_tally()
end

function request()
    if m < #made then
        m = m + 1
        return made[m]
    end
    local ch = table.remove(pending)
    if ch then
        return wrk.format("POST", path, { ["Content-Type"] = "application/json",
            ["Onsale-Pow"] = ch .. ".0" }, "{}")
    end
    return challenge_req
end

function response(status, headers, body)
    if status == 200 then
        local ch = body:match('"challenge":"([%w_%-]+)"')
        if ch then
            pending[#pending + 1] = ch
            return
        end
    end
    common.tally(status, body, 201)
end

function done(summary, latency, requests)
    common.report(summary, latency, 201)
end
