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
REPS=3 FANS=30000 DURATION=2 CONNS=50 THREADS=2 KEEP=0
SKIP_BUILD=${ONSALE_SKIP_BUILD:-0}
BUILD=${ONSALE_BUILD:-$ROOT/build}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
while (($#)); do
    case $1 in
    --skip-build) SKIP_BUILD=1 ;;
    --reps) REPS=${2:-}; shift ;;
    --fans) FANS=${2:-}; shift ;;
    --duration) DURATION=${2:-}; shift ;;
    --connections) CONNS=${2:-}; shift ;;
    --threads) THREADS=${2:-}; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) usage; exit 0 ;;
    *) printf '%s: unknown argument %s (try --help)\n' "$PROG" "$1" >&2; exit 1 ;;
    esac
    shift
done
for v in REPS FANS DURATION CONNS THREADS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { printf '%s: %s must be a positive integer\n' "$PROG" "$v" >&2; exit 1; }
done
((REPS <= 9 && FANS <= 500000 && DURATION <= 60)) ||
    { printf '%s: --reps ≤ 9, --fans ≤ 500000, --duration ≤ 60\n' "$PROG" >&2; exit 1; }
((CONNS >= THREADS)) || THREADS=$CONNS

say() { printf '[%s %s] %s\n' "$PROG" "$(date +%T)" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
for c in wrk curl python3 timeout awk redis-cli; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' not found"
done

WORK=$(mktemp -d /tmp/onsale-admitbench.XXXXXX)
chmod 755 "$WORK" # Postgres runs as user postgres when we are root: it must enter it
STATE=$WORK/state OUT=$WORK/out
mkdir -p "$OUT"
cd "$WORK"
STACK_UP=0

onsale() {
    # join_rate_per_ip=0: every join of the benchmark comes from 127.0.0.1
    ONSALE_STATE=$STATE ONSALE_BUILD=$BUILD ONSALE_SKIP_DEPS=1 ONSALE_SKIP_BUILD=1 ONSALE_SEED=0 \
        ONSALE_RESERVE_PORT=$P_RESERVE ONSALE_REDIS_PORT=$P_REDIS ONSALE_PG_PORT=$P_PG \
        ONSALE_GATEWAY_PORT=$P_GATEWAY ONSALE_PAYSIM_PORT=$P_PAYSIM \
        ONSALE_GATEWAY_JOIN_RATE_PER_IP=0 \
        timeout -k 10 240 "$ROOT/deploy/onsale" "$@"
}
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if ((STACK_UP)); then
        say "stopping the stack"
        onsale down >>"$OUT/stack.log" 2>&1 || say "warning: deploy/onsale down failed"
    fi
    if ((KEEP)); then say "kept $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ((!SKIP_BUILD)); then
    say "building $BUILD"
    ONSALE_BUILD=$BUILD timeout 1800 "$ROOT/deploy/onsale" build >"$OUT/build.log" 2>&1 ||
        { tail -n 30 "$OUT/build.log" >&2; die "build failed"; }
fi
read -r P_RESERVE P_REDIS P_PG P_GATEWAY P_PAYSIM < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(5)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
say "starting the stack in $STATE (gateway :$P_GATEWAY)"
STACK_UP=1
onsale up >>"$OUT/stack.log" 2>&1 || { tail -n 30 "$OUT/stack.log" >&2; die "deploy/onsale up failed"; }
GW=https://127.0.0.1:$P_GATEWAY
CA=$STATE/ca.pem
GATEWAY_PID=$(cat "$STATE/run/gateway.pid")
REDIS_PID=$(head -n 1 "$STATE/run/redis.pid" | tr -dc '0-9')

admin() {
    printf 'header = "Authorization: Bearer %s"\n' "$(cat "$STATE/gateway-admin-token")" |
        curl -s -K - -o "$OUT/admin_body" -w '%{http_code}' --max-time 30 --cacert "$CA" \
            -X "$1" -H 'Content-Type: application/json' ${3:+--data-binary "$3"} \
            "https://127.0.0.1:$((P_GATEWAY + 20))$2" || true # the gateway's admin listener
}
rcli() {
    REDISCLI_AUTH=$(cat "$STATE/redis-password") redis-cli --no-auth-warning -h 127.0.0.1 \
        -p "$P_REDIS" --user onsale "$@"
}
# evalsha_us: microseconds per EVALSHA call since the last CONFIG RESETSTAT
evalsha_us() { rcli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p'; }
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
field() { sed -n 's/^RESULT //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%s", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
HZ=$(getconf CLK_TCK)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

declare -a RATE P50 P99 GWUS RDUS LUAUS
for ((r = 1; r <= REPS; r++)); do
    ev=bench-admit-$r
    code=$(admin PUT "/admin/events/$ev" '{"rate_per_minute":10000000,"max_active":0,"paused":true,"mode":"fifo","dpop":false,"pow":false}')
    [[ $code == 200 || $code == 201 ]] || die "PUT /admin/events/$ev answered $code: $(cat "$OUT/admin_body")"
    say "room $r/$REPS: $FANS joins while paused"
    timeout 600 python3 "$LIB/tickets.py" --port "$P_GATEWAY" --ca "$CA" --event "$ev" \
        --count "$FANS" >"$OUT/tickets.$r" || die "joining failed"
    code=$(admin PATCH "/admin/events/$ev" '{"paused":false}')
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
    GWUS[r]=$(awk -v a="$g0" -v b="$g1" -v n="$ok" -v hz="$HZ" 'BEGIN { printf "%.0f", (b - a) / hz * 1e6 / n }')
    RDUS[r]=$(awk -v a="$r0" -v b="$r1" -v n="$ok" -v hz="$HZ" 'BEGIN { printf "%.0f", (b - a) / hz * 1e6 / n }')
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
