-- common.lua — shared by the wrk scripts of bench_gateway.sh (status.lua, join.lua).
-- Loaded with dofile() into wrk's main Lua state and into every thread's state.
--
-- The same scripts drive the gateway and the nginx reference, so the client-side cost
-- (Lua request()/response() calls) is identical on both sides of every ratio.
--
-- Each thread counts its answers per status in the global `codes` and keeps a few
-- unexpected bodies in `samples`; done() adds them up and prints one line for the shell:
--   RESULT requests=… duration_us=… ok=… codes=200:n,… connect_errors=… … p50_us=… p99_us=…
-- plus `SAMPLE <status> <body>` lines for the first few unexpected answers.

local M = {}

local threads = {}
local next_tid = 0

-- Main state: number the threads (global `tid` in each thread state).
function M.setup(thread)
    thread:set("tid", next_tid)
    next_tid = next_tid + 1
    threads[#threads + 1] = thread
end

-- Lines of a file, without newlines; errors out when it cannot be read.
function M.read_lines(path)
    local f = assert(io.open(path, "r"), "cannot open " .. tostring(path))
    local t = {}
    for line in f:lines() do
        if line ~= "" then t[#t + 1] = line end
    end
    f:close()
    return t
end

-- Thread state: reset the tallies.
function M.init_tally()
    codes = {}
    samples = {}
end

-- Thread state: count one answer; `ok` is the status that counts as success.
function M.tally(status, body, ok)
    codes[status] = (codes[status] or 0) + 1
    if status ~= ok and #samples < 3 then
        samples[#samples + 1] = tostring(status) .. " " .. string.sub(body or "", 1, 200)
    end
end

-- Main state: add the threads' tallies up and print the RESULT and SAMPLE lines.
function M.report(summary, latency, ok)
    local all, lines = {}, {}
    for _, t in ipairs(threads) do
        for code, n in pairs(t:get("codes") or {}) do
            all[code] = (all[code] or 0) + n
        end
        for _, s in ipairs(t:get("samples") or {}) do
            if #lines < 5 then lines[#lines + 1] = s end
        end
    end
    local keys = {}
    for code in pairs(all) do keys[#keys + 1] = code end
    table.sort(keys)
    local parts = {}
    for _, code in ipairs(keys) do parts[#parts + 1] = code .. ":" .. all[code] end
    local e = summary.errors
    io.write(string.format(
        "RESULT requests=%d duration_us=%d ok=%d codes=%s connect_errors=%d read_errors=%d " ..
        "write_errors=%d timeouts=%d status_errors=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
        summary.requests, summary.duration, all[ok] or 0,
        #parts > 0 and table.concat(parts, ",") or "none",
        e.connect, e.read, e.write, e.timeout, e.status,
        latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
    for _, s in ipairs(lines) do
        io.write("SAMPLE " .. string.gsub(s, "\n", " ") .. "\n")
    end
end

return M
