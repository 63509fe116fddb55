-- common.lua — shared by the wrk scripts of bench_reserve.sh (holds.lua, mkholds.lua,
-- confirm.lua, healthz.lua); each loads it with dofile() into the main Lua state and
-- into every thread's state.
--
-- Seat naming must match event_json() in bench_reserve.sh: sections S0, S1, … of
-- ROWS x PER seats, seat index i (0-based) is S<i / (ROWS*PER)>-<row>-<n>.
--
-- Latency: wrk's own percentiles are not used for the verdicts. wrk 4 "corrects" for
-- coordinated omission (stats_correct: every sample longer than twice the mean interval
-- of a connection adds synthetic samples down to that interval), so a handful of slow
-- requests — the ~1 s first hold on a freshly created 200k-seat event, say — turn into
-- thousands of fake ones and p90/p99 read hundreds of ms when 99% of the real requests
-- took a few. Here every request is timed itself (CLOCK_MONOTONIC, from the request()
-- that produced it to its response()), matched by a key the answer carries (the seat,
-- the hold id); RESULT gives both, wrk's as wrk_p50_us/wrk_p99_us.
--
-- Bookkeeping: setup() numbers the threads (global `tid` in each thread state) and keeps
-- them for done(); each thread counts its answers per status in the global `codes` and
-- keeps a few non-2xx bodies in `samples`; done() adds them up and prints one
-- machine-readable line for the shell script:
--   RESULT requests=… duration_us=… ok=… codes=201:n,409:n … p50_us=… p99_us=… …
-- plus `SAMPLE <status> <body>` lines for the first few unexpected answers.

local ffi = require("ffi")
ffi.cdef [[
struct bench_timespec { long tv_sec; long tv_nsec; };
int clock_gettime(int clk_id, struct bench_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local ts = ffi.new("struct bench_timespec")

local M = {}

M.ROWS = 200
M.PER = 200

function M.seat_id(i)
    local per_section = M.ROWS * M.PER
    local s = math.floor(i / per_section)
    local j = i % per_section
    return string.format("S%d-%d-%d", s, math.floor(j / M.PER) + 1, j % M.PER + 1)
end

-- Lines of a file, without the newline; errors out when the file cannot be read.
function M.read_lines(path)
    local f = assert(io.open(path, "r"), "cannot open " .. tostring(path))
    local t = {}
    for line in f:lines() do
        if line ~= "" then t[#t + 1] = line end
    end
    f:close()
    return t
end

-- This thread's share [lo, hi) of n items split over nthreads.
function M.range(n, nthreads, id)
    return math.floor(n * id / nthreads), math.floor(n * (id + 1) / nthreads)
end

-- Main state: number the threads.
local threads = {}
local next_tid = 0
function M.setup(thread)
    thread:set("tid", next_tid)
    next_tid = next_tid + 1
    threads[#threads + 1] = thread
end

function M.now_us()
    ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) * 1000000 + math.floor(tonumber(ts.tv_nsec) / 1000)
end

-- Thread state: reset the tallies.
function M.init_tally()
    codes = {}
    samples = {}
    exhausted = 0
    probe_pending = (tid == 0)
    lat = {}          -- µs per timed request
    pending = {}      -- key -> send time
    first_us, last_us = 0, 0
end

-- Thread state: a request identified by `key` is about to be sent.
function M.sent(key)
    local t = M.now_us()
    pending[key] = t
    if first_us == 0 then first_us = t end
end

-- Thread state: the answer naming `key` arrived (key nil: not timed).
function M.received(key)
    local t = M.now_us()
    last_us = t
    local t0 = key and pending[key]
    if t0 then
        lat[#lat + 1] = t - t0
        pending[key] = nil
    end
end

-- Thread state: true for the one request() call wrk makes in thread 0 right after init()
-- only to count the requests it returns (script_verify_request); what it returns is
-- never sent, so it must not consume a seat or a hold.
function M.is_probe()
    if probe_pending then
        probe_pending = false
        return true
    end
    return false
end

-- Thread state: count one answer; `ok` is the status that counts as success.
function M.tally(status, body, ok)
    codes[status] = (codes[status] or 0) + 1
    if status ~= ok and #samples < 3 then
        samples[#samples + 1] = tostring(status) .. " " .. string.sub(body or "", 1, 300)
    end
end

-- Main state: add the threads' tallies up and print RESULT and SAMPLE lines.
function M.report(summary, latency, ok)
    local all, sample_lines, exh, l = {}, {}, 0, {}
    local first, last = math.huge, 0
    for _, t in ipairs(threads) do
        for code, n in pairs(t:get("codes") or {}) do
            all[code] = (all[code] or 0) + n
        end
        for _, s in ipairs(t:get("samples") or {}) do
            if #sample_lines < 5 then sample_lines[#sample_lines + 1] = s end
        end
        exh = exh + (t:get("exhausted") or 0)
        for _, v in ipairs(t:get("lat") or {}) do l[#l + 1] = v end
        local f, z = t:get("first_us") or 0, t:get("last_us") or 0
        if f > 0 and f < first then first = f end
        if z > last then last = z end
    end
    table.sort(l)
    local function pct(p)
        if #l == 0 then return 0 end
        return l[math.max(1, math.ceil(#l * p / 100))]
    end
    local keys = {}
    for code in pairs(all) do keys[#keys + 1] = code end
    table.sort(keys)
    local parts = {}
    for _, code in ipairs(keys) do parts[#parts + 1] = code .. ":" .. all[code] end
    local e = summary.errors
    io.write(string.format(
        "RESULT requests=%d duration_us=%d ok=%d codes=%s connect_errors=%d read_errors=%d " ..
        "write_errors=%d timeouts=%d timed=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
        "span_us=%d wrk_p50_us=%d wrk_p99_us=%d exhausted=%d\n",
        summary.requests, summary.duration, all[ok] or 0,
        #parts > 0 and table.concat(parts, ",") or "none",
        e.connect, e.read, e.write, e.timeout,
        #l, pct(50), pct(90), pct(99), l[#l] or 0,
        last > first and last - first or 0,
        latency:percentile(50), latency:percentile(99), exh))
    for _, s in ipairs(sample_lines) do
        io.write("SAMPLE " .. string.gsub(s, "\n", " ") .. "\n")
    end
end

return M
