#!/usr/bin/env bash
# loadgen/bench/bench_admit.sh — first admissions end to end (issue 9: goal ≥ 8,000/s).
#
# On a private stack (deploy/onsale up in a temporary state dir, free ports): a paused
# FIFO room is joined N times (tickets.py), then opened with a rate far above what the
# gateway can serve (rate_per_minute 10,000,000, max_active 0); once the watermark has
# passed every place, wrk polls GET /q/E/status with each ticket exactly once (admit.lua)
# for DURATION seconds — every poll is a first admission: ticket HMAC, the Redis admit
# script, an ES256 token signed, the answer. If the tickets run out before the end the
# rate printed is a lower bound (flagged; raise --fans). Prints admissions/s, latency and
# the CPU microseconds per admission of the gateway and of Redis (from their own CPU
# time over the run), the Redis-side cost of one admit script (INFO commandstats: EVALSHA
# microseconds per call, wall clock inside Redis, so inflated on a loaded machine; nearly
# every EVALSHA of the run is an admission), medians over REPS
# rooms. The signing part of the gateway's figure is cm_jwt_sign's CPU (bench_crypto.sh).
#
# Usage: loadgen/bench/bench_admit.sh [--skip-build] [--reps N] [--fans N] [--duration S]
#            [--connections C] [--threads T] [--keep]
# Environment: ONSALE_BUILD (build dir, default <checkout>/build), ONSALE_SKIP_BUILD=1,
# ONSALE_GATEWAY_SIGNER_THREADS (and any other gateway key) pass through to the gateway.
# Needs: wrk, curl, python3. Exit status: 0 measured, 1 the benchmark could not run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
LIB=$ROOT/loadgen/bench/gateway
PROG=bench_admit
# shellcheck source=loadgen/bench/lib.sh
. "$ROOT/loadgen/bench/lib.sh"
REPS=3 FANS=30000 DURATION=2 CONNS=50 THREADS=2 KEEP=0
SKIP_BUILD=${ONSALE_SKIP_BUILD:-0}
BUILD=${ONSALE_BUILD:-$ROOT/build}

while (($#)); do
    case $1 in
    --skip-build) SKIP_BUILD=1 ;;
    --reps) REPS=${2:-}; shift ;;
    --fans) FANS=${2:-}; shift ;;
    --duration) DURATION=${2:-}; shift ;;
    --connections) CONNS=${2:-}; shift ;;
    --threads) THREADS=${2:-}; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) bench_usage; exit 0 ;;
    *) printf '%s: unknown argument %s (try --help)\n' "$PROG" "$1" >&2; exit 1 ;;
    esac
    shift
done
bench_positive REPS FANS DURATION CONNS THREADS
((REPS <= 9 && FANS <= 500000 && DURATION <= 60)) ||
    { printf '%s: --reps ≤ 9, --fans ≤ 500000, --duration ≤ 60\n' "$PROG" >&2; exit 1; }
((CONNS >= THREADS)) || THREADS=$CONNS

bench_need '' wrk curl python3 timeout awk redis-cli

bench_workdir onsale-admitbench

# join_rate_per_ip=0: every join of the benchmark comes from 127.0.0.1
onsale() { ONSALE_GATEWAY_JOIN_RATE_PER_IP=0 bench_onsale "$@"; }
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    bench_finish "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_build
bench_up bench_pick_ports
GW=https://127.0.0.1:$P_GATEWAY
CA=$STATE/ca.pem
GATEWAY_PID=$(cat "$STATE/run/gateway.pid")
REDIS_PID=$(head -n 1 "$STATE/run/redis.pid" | tr -dc '0-9')

rcli() {
    REDISCLI_AUTH=$(cat "$STATE/redis-password") redis-cli --no-auth-warning -h 127.0.0.1 \
        -p "$P_REDIS" --user onsale "$@"
}
# evalsha_us: microseconds per EVALSHA call since the last CONFIG RESETSTAT
evalsha_us() { rcli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p'; }
LOAD0=$(bench_load)

declare -a RATE P50 P99 GWUS RDUS LUAUS
for ((r = 1; r <= REPS; r++)); do
    ev=bench-admit-$r
    code=$(gw_admin PUT "/admin/events/$ev" '{"rate_per_minute":10000000,"max_active":0,"paused":true,"mode":"fifo","dpop":false,"pow":false}')
    [[ $code == 200 || $code == 201 ]] || die "PUT /admin/events/$ev answered $code: $(cat "$OUT/admin_body")"
    say "room $r/$REPS: $FANS joins while paused"
    timeout 600 python3 "$LIB/tickets.py" --port "$P_GATEWAY" --ca "$CA" --event "$ev" \
        --count "$FANS" >"$OUT/tickets.$r" || die "joining failed"
    code=$(gw_admin PATCH "/admin/events/$ev" '{"paused":false}')
    [[ $code == 200 ]] || die "PATCH /admin/events/$ev answered $code: $(cat "$OUT/admin_body")"
    # the watermark passes every place: the last fan's poll says admitted (one admission)
    last=$(tail -n 1 "$OUT/tickets.$r")
    for ((i = 0; i < 300; i++)); do
        curl -s --cacert "$CA" -H "Authorization: Bearer $last" "$GW/q/$ev/status" | grep -q '"admitted"' && break
        sleep 0.1
    done
    ((i < 300)) || die "the last fan of $ev was never admitted"
    head -n $((FANS - 1)) "$OUT/tickets.$r" >"$OUT/poll.$r"
    say "room $r/$REPS: wrk -t$THREADS -c$CONNS -d${DURATION}s, each of $((FANS - 1)) tickets polled at most once"
    rcli CONFIG RESETSTAT >/dev/null
    g0=$(cpu_ticks "$GATEWAY_PID") r0=$(cpu_ticks "$REDIS_PID")
    timeout -k 10 -s INT $((DURATION + 60)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --timeout 5s --latency \
        -s "$LIB/admit.lua" "$GW" -- "/q/$ev/status" "$OUT/poll.$r" "$THREADS" >"$OUT/wrk.$r" 2>&1 || true
    g1=$(cpu_ticks "$GATEWAY_PID") r1=$(cpu_ticks "$REDIS_PID")
    LUAUS[r]=$(evalsha_us)
    grep -q '^RESULT ' "$OUT/wrk.$r" || { cat "$OUT/wrk.$r" >&2; die "wrk printed no result"; }
    ok=$(field "$OUT/wrk.$r" ok) dur=$(field "$OUT/wrk.$r" duration_us)
    bad=$(field "$OUT/wrk.$r" codes | tr ',' '\n' | grep -v '^200:\|^299:' || true)
    [[ -z $bad ]] || { grep -E '^(RESULT|SAMPLE)' "$OUT/wrk.$r" >&2; die "unexpected answers: $bad"; }
    ((ok < FANS - 1)) || say "warning: every ticket was spent before the end: the rate is a lower bound (raise --fans)"
    RATE[r]=$(awk -v n="$ok" -v d="$dur" 'BEGIN { printf "%.0f", n / (d / 1e6) }')
    P50[r]=$(awk -v u="$(field "$OUT/wrk.$r" p50_us)" 'BEGIN { printf "%.2f", u / 1000 }')
    P99[r]=$(awk -v u="$(field "$OUT/wrk.$r" p99_us)" 'BEGIN { printf "%.2f", u / 1000 }')
    GWUS[r]=$(us_per "$g0" "$g1" "$ok")
    RDUS[r]=$(us_per "$r0" "$r1" "$ok")
    printf '%-4s %10s admissions/s  p50 %7s ms  p99 %7s ms  CPU us/admission: gateway %5s  redis %5s (admit script %s)\n' \
        "$r" "${RATE[r]}" "${P50[r]}" "${P99[r]}" "${GWUS[r]}" "${RDUS[r]}" "${LUAUS[r]:-?}"
done
printf '\nfirst admissions end to end: median %s/s (goal >= 8000/s: %s), p50 %s ms, p99 %s ms;\n' \
    "$(median "${RATE[@]}")" "$(awk -v m="$(median "${RATE[@]}")" 'BEGIN { print (m >= 8000 ? "met" : "NOT met") }')" \
    "$(median "${P50[@]}")" "$(median "${P99[@]}")"
printf 'CPU per admission: gateway %s us, redis %s us (of which the admit script %s us)\n' \
    "$(median "${GWUS[@]}")" "$(median "${RDUS[@]}")" "$(median "${LUAUS[@]}")"
printf '(medians of %d rooms of %d fans, wrk -t%d -c%d, %d cores, load average before: %s)\n' \
    "$REPS" "$FANS" "$THREADS" "$CONNS" "$(nproc)" "$LOAD0"
