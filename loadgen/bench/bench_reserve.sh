#!/usr/bin/env bash
# loadgen/bench/bench_reserve.sh — the reserve measured side by side with its own backends.
#
# In one run, on a private stack (deploy/onsale up in a temporary state dir, free ports):
#
#   holds    wrk, C keep-alive TLS connections, POST /v1/events/E/holds for one seat,
#            every seat asked for once, tokens rotating over many buyers (holds.lua)
#     vs     redis-benchmark SET k v NX PX 60000 on the same Redis, same concurrency
#     and    redis-benchmark running the reserve's hold script itself (prelude +
#            hold_seats.lua, EVALSHA, the same key pattern: seed, hold, buyer, active,
#            idempotency and one random seat key under one {event} tag), -c C: the
#            ratio to it is what the reserve adds around its own Redis work
#   confirms wrk, C connections, POST /v1/holds/H/confirm, each pre-created hold (one buyer
#            each) confirmed once with its own Idempotency-Key (mkholds.lua, confirm.lua)
#     vs     pgbench, same Postgres, C clients: one transaction inserting a checkout, a
#            booking and a booking item under the unique keys (reserve/pg_*.sql)
#     and    pgbench replaying the saga's own SQL for one confirmation (reserve/pg_saga.sql:
#            the same functions, statements and commits, in order, on the real tables),
#            C clients: what Postgres alone needs per confirmation the way the reserve
#            asks for it
#            CPU µs per confirmation of each process (reserve, Postgres — postmaster and
#            every backend, exited ones included —, Redis, paysim) from /proc over each run
#   also     the reserve's GET /healthz on the same connections (its transport floor),
#            each buyer's first hold (token not cached yet) and the first hold on a
#            fresh event — reported apart, not in the ratios
#
# Each pair runs REPS times, ours then the reference, so both see the same machine; the
# table at the end gives every repetition, the medians, the spread ((max-min)/median —
# how noisy the machine was) and the ratios against the targets of issue 2 (holds ≥ 0.5×
# Redis SET NX PX with p99 < 20 ms; confirms ≥ 0.5× pgbench). Ratios, not absolute
# times, are the result: absolute figures depend on whatever else the machine is doing.
#
# Usage: loadgen/bench/bench_reserve.sh [--skip-build] [--reps N] [--duration S]
#                                       [--connections C] [--keep]
# Environment: ONSALE_BUILD (build dir, default <checkout>/build), ONSALE_SKIP_BUILD=1
# (same as --skip-build), BENCH_HOLD_TOKENS (buyers rotating in the hold run, 20000: also
# the first-use pass, long enough — ~2 s — that wrk's start and its connections' TLS
# handshakes do not weigh on it, as they did at 5000),
# BENCH_TOKEN_RECORDS (1: each minted token is recorded in Redis as the gateway records
# the tokens it signs; 0: none, every first hold verifies), BENCH_PYTHON (a python3 with
# python3-cryptography), BENCH_PAYSIM_LATENCY_MS (the payment
# simulator's charge latency during the run, 0; it defaults to 20-80 ms on its own),
# BENCH_REDIS_TLS=1 (the stack's Redis speaks TLS only: ONSALE_REDIS_TLS=1; the reserve,
# redis-cli and redis-benchmark all go over TLS), BENCH_PG_TIMEOUT_MS (the reserve's
# pg_timeout_ms during the run, 60000). The hold runs also report the CPU time
# per hold of the reserve and of Redis (µs), the figure docs/sizing.md uses.
# Needs: wrk, redis-benchmark, redis-cli, pgbench, psql, curl, python3 + cryptography.
# Exit status: 0 measured (whatever the verdicts), 1 the benchmark could not run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
LIB=$ROOT/loadgen/bench/reserve
# The commits of one confirmation in pg_saga.sql (its statements: each its own transaction).
SAGA_COMMITS=$(grep -c '^SELECT' "$LIB/pg_saga.sql")
PROG=bench_reserve
# shellcheck source=loadgen/bench/lib.sh
. "$ROOT/loadgen/bench/lib.sh"

REPS=3
DURATION=10       # seconds per measured run
CONNS=50          # concurrent connections / clients, ours and reference alike
THREADS=2         # wrk threads, pgbench -j
HOLD_TOKENS=${BENCH_HOLD_TOKENS:-20000}
# Token records (docs/tokens.md): the minted tokens are recorded in Redis as the gateway
# records the tokens it signs, so a buyer's first hold needs no signature check; 0 = no
# records (every first hold verifies the signature, as without a gateway in front).
TOKEN_RECORDS=${BENCH_TOKEN_RECORDS:-1}
# The payment simulator's charge latency (it defaults to 20-80 ms). The confirm target
# compares the reserve's own work with Postgres, so the provider answers at once unless
# asked otherwise; its journal fsync stays on.
PAYSIM_LATENCY=${BENCH_PAYSIM_LATENCY_MS:-0}
REDIS_TLS=${BENCH_REDIS_TLS:-0}
# The reserve's Postgres deadline: saving a 199,800-seat event is one statement that a
# busy machine can stretch past the default 5 s.
PG_TIMEOUT_MS=${BENCH_PG_TIMEOUT_MS:-60000}
HOLD_SEATS=199800 # per hold-run event (the reserve takes up to 200,000 seats an event)
RB_REQUESTS=200000
RB_KEYSPACE=1000000
PRE_CONNS=100     # connections used to pre-create holds (not measured)
PRE_LIMIT=120     # seconds pre-creating one batch of holds may take
CALIB_HOLDS=3000  # holds for the confirm warm-up that sizes the measured batches
CALIB_SECONDS=3
FLOOR_SECONDS=5   # GET /healthz run per repetition (the transport floor)
SKIP_BUILD=${ONSALE_SKIP_BUILD:-0}
KEEP=0
BUILD=${ONSALE_BUILD:-$ROOT/build}

while (($#)); do
    case $1 in
    --skip-build) SKIP_BUILD=1 ;;
    --reps) REPS=${2:?}; shift ;;
    --duration) DURATION=${2:?}; shift ;;
    --connections) CONNS=${2:?}; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) bench_usage; exit 0 ;;
    *) printf '%s: unknown argument %s (try --help)\n' "$PROG" "$1" >&2; exit 1 ;;
    esac
    shift
done
[[ $TOKEN_RECORDS == [01] ]] || { printf '%s: BENCH_TOKEN_RECORDS must be 0 or 1\n' "$PROG" >&2; exit 1; }
[[ $REDIS_TLS == [01] ]] || { printf '%s: BENCH_REDIS_TLS must be 0 or 1\n' "$PROG" >&2; exit 1; }
[[ $PAYSIM_LATENCY =~ ^[0-9]+$ ]] || { printf '%s: BENCH_PAYSIM_LATENCY_MS must be a number of ms\n' "$PROG" >&2; exit 1; }
bench_positive REPS DURATION CONNS HOLD_TOKENS
((CONNS >= THREADS)) || THREADS=$CONNS

bench_need 'wrk, redis-tools, postgresql-contrib, curl' wrk redis-benchmark redis-cli pgbench psql curl timeout awk
PY=
for p in ${BENCH_PYTHON:-} /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import cryptography' 2>/dev/null; then
        PY=$p
        break
    fi
done
[[ -n $PY ]] || die "no python3 with the cryptography module (apt-get install python3-cryptography)"

# ---------------------------------------------------------------------------------------
# the stack, and cleaning it up whatever happens

bench_workdir onsale-bench
BG_PID=
RLOG=$STATE/log/reserve.log

onsale() {
    ONSALE_PAYSIM_LATENCY_MIN_MS=$PAYSIM_LATENCY ONSALE_PAYSIM_LATENCY_MAX_MS=$PAYSIM_LATENCY \
        ONSALE_RESERVE_PG_TIMEOUT_MS=$PG_TIMEOUT_MS ONSALE_REDIS_TLS=$REDIS_TLS bench_onsale "$@"
}

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $BG_PID ]]; then kill -INT "$BG_PID" 2>/dev/null || true; fi
    bench_log_tail "$rc" "$RLOG" reserve
    bench_finish "$rc" "state, logs, wrk outputs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2317 # called by bench_up
pick_ports() {
    bench_pick_ports "$PY"
    URL=https://127.0.0.1:$P_RESERVE
}

# `up` starts the reserve before the gateway: a gateway that fails to start does not
# concern this benchmark, as long as the reserve answers /readyz.
# shellcheck disable=SC2317 # called by bench_up
reserve_ready_anyway() {
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$STATE/ca.pem" \
        "$URL/readyz" 2>/dev/null) == 200 ]] || return 1
    STACK_NOTE="deploy/onsale up failed after the reserve was ready; went on without it: $(grep 'error:' "$OUT/stack.log" | tail -n 1)"
    say "warning: $STACK_NOTE"
}

bench_build
TOKEN_BIN=$BUILD/loadgen/onsale-token
[[ -x $BUILD/reserve/onsale-reserve && -x $TOKEN_BIN ]] || die "$BUILD has no onsale-reserve/onsale-token"

STACK_NOTE=
bench_up pick_ports reserve_ready_anyway
RESERVE_PID=$(cat "$STATE/run/reserve.pid")
REDIS_PID=$(cat "$STATE/run/redis.pid")
# The stack's Redis and Postgres take authenticated clients only (ACL user, scram).
REDIS_AUTH=(--user onsale -a "$(cat "$STATE/redis-password")")
if ((REDIS_TLS)); then # the stack's client certificate is its server certificate
    REDIS_AUTH+=(--tls --cacert "$STATE/ca.pem" --cert "$STATE/server.pem" --key "$STATE/server-key.pem")
fi
PGPASSWORD=$(cat "$STATE/pg-password")
export PGPASSWORD
PAYSIM_PID=$(cat "$STATE/run/paysim.pid" 2>/dev/null || echo 0) # 0: not running
RLOG_START=$(stat -c %s "$RLOG")

# ---------------------------------------------------------------------------------------
# helpers

reserve_alive() {
    [[ -r /proc/$RESERVE_PID/cmdline ]] && tr '\0' ' ' <"/proc/$RESERVE_PID/cmdline" | grep -q onsale-reserve
}
check_alive() { reserve_alive || die "the reserve (pid $RESERVE_PID) died during $1"; }

# cpu_pct TICKS_BEFORE TICKS_AFTER SECONDS: percent of one core.
# pg_ticks: Postgres' ticks so far — the postmaster, its live backends, and (cutime/cstime)
# every backend it reaped (pgbench's exit at the end of their run).
pg_ticks() {
    local pm t=0 c
    pm=$(cat "$STATE/run/postgres.pid" 2>/dev/null) || { echo 0; return; }
    t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$pm/stat" 2>/dev/null || echo 0)
    local -a kids=()
    read -ra kids <"/proc/$pm/task/$pm/children" 2>/dev/null || true
    for c in "${kids[@]}"; do
        t=$((t + $(cpu_ticks "$c")))
    done
    echo "$t"
}
# paysim_stats: "requests handshakes resumed" from the payment simulator (GET /v1/stats),
# or "0 0 0" when it has none (not running, or an older simulator).
paysim_stats() {
    curl -s --max-time 5 --cacert "$STATE/ca.pem" "https://127.0.0.1:$P_PAYSIM/v1/stats" 2>/dev/null |
        "$PY" -c 'import json, sys
try:
    d = json.load(sys.stdin); print(d["requests"], d["tls_handshakes"], d["tls_resumed"])
except Exception:
    print(0, 0, 0)' 2>/dev/null || echo 0 0 0
}
# us_per TICKS_BEFORE TICKS_AFTER COUNT: CPU microseconds per item.

# admin_put EVENT JSON: creates the event (admin token passed on curl's stdin config).
# A big event's save can pass the reserve's Postgres deadline on a busy machine: its
# 503 says "retry shortly", and PUT is idempotent, so it is tried up to five times.
admin_put() {
    local code attempt
    for attempt in 1 2 3 4 5; do
        code=$(printf 'header = "Authorization: Bearer %s"\n' "$(cat "$STATE/admin-token")" |
            curl -s -K - -o "$OUT/admin_body" -w '%{http_code}' --max-time 120 --cacert "$STATE/ca.pem" \
                -X PUT -H 'Content-Type: application/json' --data-binary "$2" \
                "https://127.0.0.1:$((P_RESERVE + 20))/admin/events/$1") || true
        [[ $code == 503 ]] || break
        say "PUT /admin/events/$1 answered 503 (attempt $attempt): retrying"
        sleep 3
    done
    [[ $code == 201 || $code == 200 ]] ||
        die "PUT /admin/events/$1 answered '$code': $(head -c 300 "$OUT/admin_body" 2>/dev/null)"
}

# event_json SEATS: sections S0, S1, … of 200 rows x 200 seats (common.lua names them).
event_json() {
    awk -v n="$1" 'BEGIN {
        per = 200 * 200; printf "{\"sections\":["
        for (k = 0; k * per < n; k++) {
            left = n - k * per; rows = left >= per ? 200 : int((left + 199) / 200)
            printf "%s{\"id\":\"S%d\",\"rows\":%d,\"seats_per_row\":200,\"price\":2500}", k ? "," : "", k, rows
        }
        printf "],\"currency\":\"EUR\",\"hold_ttl_seconds\":600,\"max_per_buyer\":0}"
    }'
}

# mint EVENT SUB COUNT FILE: COUNT admission tokens for EVENT, subs SUB-1..SUB-COUNT.
mint() {
    local tpl
    tpl=$("$TOKEN_BIN" --key "$STATE/keys/admission-1.pem" --event "$1" --sub "$2-template") ||
        die "onsale-token failed"
    "$PY" "$LIB/mint_tokens.py" --key "$STATE/keys/admission-1.pem" --template "$tpl" \
        --event "$1" --sub "$2" --count "$3" >"$4" || die "minting tokens failed"
    [[ $(wc -l <"$4") -eq $3 ]] || die "minted $(wc -l <"$4") tokens, wanted $3"
    ((TOKEN_RECORDS)) || return 0
    # What the gateway does when it hands a token out (gateway/gw_admit.c record_token):
    # SET os:{E}:tk:<sha256 of the token> 1 PXAT <exp in ms>, one per token.
    "$PY" -c '
import base64, hashlib, json, sys
ev = sys.argv[1]
out = sys.stdout.buffer
for line in open(sys.argv[2], "rb"):
    tok = line.strip()
    p = tok.split(b".")[1]
    exp = json.loads(base64.urlsafe_b64decode(p + b"=" * (-len(p) % 4)))["exp"]
    args = [b"SET", ("os:{%s}:tk:" % ev).encode() + hashlib.sha256(tok).hexdigest().encode(),
            b"1", b"PXAT", str(exp * 1000).encode()]
    out.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
' "$1" "$4" | redis-cli -h 127.0.0.1 -p "$P_REDIS" "${REDIS_AUTH[@]}" --no-auth-warning --pipe \
        >"$OUT/records.log" 2>&1 || { cat "$OUT/records.log" >&2; die "writing the token records failed"; }
}

# wrk_run OUTFILE SECONDS SCRIPT ARGS…: one measured wrk run (bounded), ours.
wrk_run() {
    local out=$1 secs=$2 script=$3
    shift 3
    timeout -k 10 -s INT $((secs + 60)) wrk -t"$THREADS" -c"$CONNS" -d"${secs}s" --timeout 5s \
        --latency -s "$LIB/$script" "$URL" -- "$@" >"$out" 2>&1 || true
    grep -q '^RESULT ' "$out" || { cat "$out" >&2; die "wrk ($script) printed no result"; }
}

# precreate EVENT N TOKENS OUTFILE [CONNECTIONS]: N holds, seat i held by token line i+1;
# writes hold_id<TAB>token<TAB>amount lines. Sets PRE_GOT to how many it got; wrk's
# output (RESULT) is in $OUT/pre.EVENT.wrk.
precreate() {
    local ev=$1 n=$2 tokens=$3 dest=$4 conns=${5:-$PRE_CONNS} pre=$OUT/pre.$1 i
    rm -f "$pre".*
    wrk -t"$THREADS" -c"$conns" -d"${PRE_LIMIT}s" --timeout 5s -s "$LIB/mkholds.lua" "$URL" \
        -- "$tokens" "$ev" "$n" "$THREADS" "$pre" >"$pre.wrk" 2>&1 &
    BG_PID=$!
    for ((i = 0; i < PRE_LIMIT * 10; i++)); do
        local done_files=("$pre".done.*)
        [[ -e ${done_files[0]} && ${#done_files[@]} -ge $THREADS ]] && break
        kill -0 "$BG_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -INT "$BG_PID" 2>/dev/null || true
    wait "$BG_PID" || true
    BG_PID=
    check_alive "pre-creating holds"
    cat "$pre".[0-9]* >"$dest" 2>/dev/null || : >"$dest"
    local got
    got=$(wc -l <"$dest")
    PRE_GOT=$got
    if ((got < n)); then
        say "warning: pre-creating $n holds on $ev gave $got; answers: $(field "$pre.wrk" codes)"
        sed -n 's/^SAMPLE /  /p' "$pre.wrk" >&2
        printf '%s\n' "$ev: $((n - got)) of $n hold requests failed: $(field "$pre.wrk" codes)" >>"$OUT/anomalies"
    fi
    ((got > 0)) || die "could not pre-create any hold on $ev"
}

# note_anomalies LABEL FILE: remembers non-201 answers and socket errors of a wrk run.
note_anomalies() {
    local label=$1 f=$2 codes errs
    codes=$(field "$f" codes)
    errs="connect $(field "$f" connect_errors), read $(field "$f" read_errors), write $(field "$f" write_errors), timeouts $(field "$f" timeouts)"
    if [[ $codes != 201:* || $codes == *,* || $errs != "connect 0, read 0, write 0, timeouts 0" ]]; then
        printf '%s: answers %s; socket errors: %s\n' "$label" "$codes" "$errs" >>"$OUT/anomalies"
        sed -n 's/^SAMPLE /    e.g. /p' "$f" >>"$OUT/anomalies"
    fi
    if [[ $(field "$f" exhausted) != 0 ]]; then
        printf '%s: INVALID, ran out of %s before the end (fallback GET /healthz counted above)\n' \
            "$label" "$3" >>"$OUT/anomalies"
    fi
}

# ms FILE KEY: a µs field of a RESULT line in ms.
ms() { awk -v u="$(field "$1" "$2")" 'BEGIN { printf "%.2f", u / 1000 }'; }

# warm EVENT: GET availability on C connections for a second, so every worker has loaded
# EVENT into its catalogue (each worker loads an event on its first request for it).
warm() {
    timeout -k 10 60 wrk -t"$THREADS" -c"$CONNS" -d1s --timeout 5s \
        "$URL/v1/events/$1/availability" >"$OUT/warm.$1" 2>&1 || true
}

# first_hold EVENT SEAT_INDEX: one hold by a buyer of its own; prints its time in ms.
first_hold() {
    local tok out
    tok=$("$TOKEN_BIN" --key "$STATE/keys/admission-1.pem" --event "$1" --sub bench-first) ||
        die "onsale-token failed"
    out=$(printf 'header = "Authorization: Bearer %s"\n' "$tok" |
        curl -s -K - -o "$OUT/first_body" -w '%{http_code} %{time_total}' --max-time 30 \
            --cacert "$STATE/ca.pem" -H 'Content-Type: application/json' \
            --data-binary "{\"seats\":[\"$(seat_id "$2")\"]}" "$URL/v1/events/$1/holds") || true
    [[ $out == 201\ * ]] || die "first hold on $1 answered '$out': $(head -c 300 "$OUT/first_body")"
    awk -v t="${out#* }" 'BEGIN { printf "%.0f", t * 1000 }'
}

# seat_id INDEX: the seat's name (common.lua's seat_id).
seat_id() { awk -v i="$1" 'BEGIN { s = int(i / 40000); j = i % 40000; printf "S%d-%d-%d", s, int(j / 200) + 1, j % 200 + 1 }'; }

# stats V…: "median min max spread%" of the values.
stats() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%s %s %s %.0f\n", m, v[1], v[NR], (m > 0 ? (v[NR] - v[1]) / m * 100 : 0) }'
}
fmt() { awk -v v="$1" -v d="${2:-0}" 'BEGIN { printf "%.*f", d, v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }

: >"$OUT/anomalies"
LOAD_START=$(bench_load)
T_START=$SECONDS

# ---------------------------------------------------------------------------------------
# 1. holds vs Redis SET NX PX

declare -a H_RPS H_P50 H_P99 H_WP99 H_CPU H_NON R_RPS R_P50 R_P99 R_CPU HR_RATIO
declare -a H_US H_REDIS_US # CPU µs per hold answered 201: the reserve's, Redis'
declare -a S_RPS S_P50 S_P99 S_CPU HS_RATIO
# The hold script as the reserve loads it (rsv_lua.c: the prelude, a newline, the body).
HOLD_SHA=$({ cat "$ROOT/reserve/lua/prelude.lua"; printf '\n'; cat "$ROOT/reserve/lua/hold_seats.lua"; } |
    redis-cli -h 127.0.0.1 -p "$P_REDIS" "${REDIS_AUTH[@]}" --no-auth-warning -x SCRIPT LOAD) || die "SCRIPT LOAD of hold_seats failed"
redis-cli -h 127.0.0.1 -p "$P_REDIS" "${REDIS_AUTH[@]}" --no-auth-warning SET 'os:{rb}:seed' 1 >/dev/null || die "redis-cli SET failed"
declare -a K_RPS K_P50 K_P99 K_CPU K_FIRST F_RPS HF_RATIO K_US R_US S_US
for ((r = 1; r <= REPS; r++)); do
    ev=bench-h$r
    say "holds $r/$REPS: event $ev ($HOLD_SEATS seats), $HOLD_TOKENS buyers' tokens"
    admin_put "$ev" "$(event_json "$HOLD_SEATS")"
    mint "$ev" "hbuyer$r" "$HOLD_TOKENS" "$OUT/tokens.$ev"
    # The first hold on a new event waits while the reserve loads it: time it alone.
    K_FIRST[r]=$(first_hold "$ev" "$((HOLD_SEATS - 1))")
    # Each worker loads the event into its own catalogue on its first request for it
    # (a 199,800-seat event: a few hundred ms): done here, so the first-use figures
    # below are the buyers' first holds, not that load.
    warm "$ev"
    # Every buyer's first hold (token not yet cached): seats 0..T-1, one per token.
    say "holds $r/$REPS: first use of each of the $HOLD_TOKENS tokens (not the measured run)"
    c0=$(cpu_ticks "$RESERVE_PID")
    precreate "$ev" "$HOLD_TOKENS" "$OUT/tokens.$ev" "$OUT/cold-holds.$ev" "$CONNS"
    c1=$(cpu_ticks "$RESERVE_PID")
    f=$OUT/pre.$ev.wrk
    K_US[r]=$(us_per "$c0" "$c1" "$(field "$f" ok)")
    K_CPU[r]=$(cpu_pct "$c0" "$c1" "$(awk -v d="$(field "$f" span_us)" 'BEGIN { print d / 1e6 }')")
    K_RPS[r]=$(awk -v ok="$(field "$f" ok)" -v d="$(field "$f" span_us)" 'BEGIN { printf "%.1f", (d > 0 ? ok / (d / 1e6) : 0) }')
    K_P50[r]=$(ms "$f" p50_us) K_P99[r]=$(ms "$f" p99_us)

    say "holds $r/$REPS: reserve, wrk -t$THREADS -c$CONNS -d${DURATION}s, seats $HOLD_TOKENS.. with the same tokens"
    c0=$(cpu_ticks "$RESERVE_PID") rc0=$(cpu_ticks "$REDIS_PID")
    wrk_run "$OUT/holds.$r" "$DURATION" holds.lua "$OUT/tokens.$ev" "$ev" "$HOLD_TOKENS" "$((HOLD_SEATS - 1))" "$THREADS"
    c1=$(cpu_ticks "$RESERVE_PID") rc1=$(cpu_ticks "$REDIS_PID")
    check_alive "the hold run"
    f=$OUT/holds.$r
    dur=$(field "$f" duration_us)
    H_RPS[r]=$(awk -v ok="$(field "$f" ok)" -v d="$dur" 'BEGIN { printf "%.1f", ok / (d / 1e6) }')
    H_P50[r]=$(ms "$f" p50_us) H_P99[r]=$(ms "$f" p99_us) H_WP99[r]=$(ms "$f" wrk_p99_us)
    H_NON[r]=$(($(field "$f" requests) - $(field "$f" ok)))
    H_CPU[r]=$(cpu_pct "$c0" "$c1" "$(awk -v d="$dur" 'BEGIN { print d / 1e6 }')")
    H_US[r]=$(us_per "$c0" "$c1" "$(field "$f" ok)")
    H_REDIS_US[r]=$(us_per "$rc0" "$rc1" "$(field "$f" ok)")
    note_anomalies "holds run $r" "$f" seats

    say "holds $r/$REPS: reserve GET /healthz floor, wrk -t$THREADS -c$CONNS -d${FLOOR_SECONDS}s"
    timeout -k 10 -s INT $((FLOOR_SECONDS + 60)) wrk -t"$THREADS" -c"$CONNS" -d"${FLOOR_SECONDS}s" \
        --timeout 5s -s "$LIB/healthz.lua" "$URL" >"$OUT/healthz.$r" 2>&1 || true
    grep -q '^RESULT ' "$OUT/healthz.$r" || { cat "$OUT/healthz.$r" >&2; die "wrk (healthz.lua) printed no result"; }
    check_alive "the /healthz run"
    F_RPS[r]=$(awk -v ok="$(field "$OUT/healthz.$r" ok)" -v d="$(field "$OUT/healthz.$r" duration_us)" 'BEGIN { printf "%.1f", ok / (d / 1e6) }')
    HF_RATIO[r]=$(ratio "${H_RPS[r]}" "${F_RPS[r]}")

    say "holds $r/$REPS: redis-benchmark -c $CONNS -n $RB_REQUESTS SET NX PX"
    c0=$(cpu_ticks "$REDIS_PID")
    t0=$(date +%s.%N)
    timeout -k 10 120 redis-benchmark -h 127.0.0.1 -p "$P_REDIS" "${REDIS_AUTH[@]}" \
        -c "$CONNS" -n "$RB_REQUESTS" \
        -r "$RB_KEYSPACE" --csv SET 'bench:key:__rand_int__' v NX PX 60000 >"$OUT/redis.$r" 2>&1 ||
        { cat "$OUT/redis.$r" >&2; die "redis-benchmark failed"; }
    t1=$(date +%s.%N)
    c1=$(cpu_ticks "$REDIS_PID")
    line=$(grep '^"SET' "$OUT/redis.$r" | tr -d '"') || die "redis-benchmark printed no result"
    IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"$line"
    R_RPS[r]=$rps R_P50[r]=$p50 R_P99[r]=$p99
    R_CPU[r]=$(cpu_pct "$c0" "$c1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
    R_US[r]=$(us_per "$c0" "$c1" "$RB_REQUESTS")
    HR_RATIO[r]=$(ratio "${H_RPS[r]}" "${R_RPS[r]}")

    say "holds $r/$REPS: redis-benchmark -c $CONNS -n $RB_REQUESTS EVALSHA hold_seats"
    c0=$(cpu_ticks "$REDIS_PID")
    t0=$(date +%s.%N)
    # KEYS seed, hold, buyer, active, idempotency record, token record, seat; ARGV hold
    # id, buyer, ttl ms, max hold ms, max per buyer (0, as the benchmark's events), seats,
    # amount, record keep ms, request hash ('' = no Idempotency-Key), token record needed
    # ('' = a cached, verified token), as rsv_hold.c passes them
    timeout -k 10 120 redis-benchmark -h 127.0.0.1 -p "$P_REDIS" "${REDIS_AUTH[@]}" -c "$CONNS" -n "$RB_REQUESTS" \
        -r "$RB_KEYSPACE" --csv EVALSHA "$HOLD_SHA" 7 'os:{rb}:seed' 'os:{rb}:h:__rand_int__' \
        'os:{rb}:b:__rand_int__' 'os:{rb}:active' 'os:{rb}:ik:' 'os:{rb}:tk:' 'os:{rb}:s:__rand_int__' \
        hold-id buyer 600000 900000 0 A-1-1 5000 3600000 '' '' >"$OUT/redis-hold.$r" 2>&1 ||
        { cat "$OUT/redis-hold.$r" >&2; die "redis-benchmark (hold script) failed"; }
    t1=$(date +%s.%N)
    c1=$(cpu_ticks "$REDIS_PID")
    line=$(grep '^"EVALSHA' "$OUT/redis-hold.$r" | tr -d '"') ||
        die "redis-benchmark (hold script) printed no result"
    IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"$line"
    S_RPS[r]=$rps S_P50[r]=$p50 S_P99[r]=$p99
    S_CPU[r]=$(cpu_pct "$c0" "$c1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
    S_US[r]=$(us_per "$c0" "$c1" "$RB_REQUESTS")
    HS_RATIO[r]=$(ratio "${H_RPS[r]}" "${S_RPS[r]}")
done
redis-cli -h 127.0.0.1 -p "$P_REDIS" "${REDIS_AUTH[@]}" --no-auth-warning EVAL "for _, k in ipairs(redis.call('KEYS', 'os:{rb}:*')) do redis.call('UNLINK', k) end" 0 >/dev/null 2>&1 || true

# ---------------------------------------------------------------------------------------
# 2. confirms vs pgbench

PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$P_PG" -U onsale -d onsale)
PGCONNECT_TIMEOUT=5 timeout 60 "${PSQL[@]}" -f "$LIB/pg_tables.sql" >"$OUT/pg_tables.log" 2>&1 ||
    { cat "$OUT/pg_tables.log" >&2; die "creating the bench_* tables failed"; }
# The saga replay's event: Postgres only (the reserve never serves it).
PGCONNECT_TIMEOUT=5 timeout 60 "${PSQL[@]}" -c "INSERT INTO events (event_id, currency,
    hold_ttl_seconds, checkout_extension_seconds, max_hold_seconds, max_per_buyer)
    VALUES ('bench-replay', 'EUR', 300, 300, 900, 0) ON CONFLICT DO NOTHING" >>"$OUT/pg_tables.log" 2>&1 ||
    { cat "$OUT/pg_tables.log" >&2; die "creating the saga replay event failed"; }

# Warm-up that also sizes the batches: a short confirm run on CALIB_HOLDS holds.
say "confirms: warm-up (${CALIB_SECONDS}s on $CALIB_HOLDS holds) to size the batches"
ev=bench-c0
admin_put "$ev" "$(event_json "$CALIB_HOLDS")"
mint "$ev" cbuyer0 "$CALIB_HOLDS" "$OUT/tokens.$ev"
precreate "$ev" "$CALIB_HOLDS" "$OUT/tokens.$ev" "$OUT/holds-list.$ev"
wrk_run "$OUT/confirm.0" "$CALIB_SECONDS" confirm.lua "$OUT/holds-list.$ev" "$THREADS"
check_alive "the confirm warm-up"
note_anomalies "confirm warm-up" "$OUT/confirm.0" holds
RATE_EST=$(awk -v ok="$(field "$OUT/confirm.0" ok)" -v d="$(field "$OUT/confirm.0" duration_us)" \
    -v ex="$(field "$OUT/confirm.0" exhausted)" 'BEGIN { r = ok / (d / 1e6); if (ex > 0) r *= 2; printf "%.0f", (r < 50 ? 50 : r) }')

declare -a C_RPS C_P50 C_P99 C_WP99 C_CPU C_PCPU C_TPC C_NON C_N G_TPS G_LAT G_FAIL CG_RATIO
declare -a U_RSV U_PG U_RDS U_PAY U_GPG X_TPS X_PG X_FAIL CX_RATIO
for ((r = 1; r <= REPS; r++)); do
    n=$(awk -v e="$RATE_EST" -v d="$DURATION" -v max="$HOLD_SEATS" 'BEGIN { n = int(e * d * 1.5) + 500; print (n > max ? max : n) }')
    ev=bench-c$r
    say "confirms $r/$REPS: event $ev, pre-creating $n holds (one buyer each; ~${RATE_EST}/s expected)"
    admin_put "$ev" "$(event_json "$n")"
    mint "$ev" "cbuyer$r" "$n" "$OUT/tokens.$ev"
    precreate "$ev" "$n" "$OUT/tokens.$ev" "$OUT/holds-list.$ev"
    C_N[r]=$PRE_GOT

    say "confirms $r/$REPS: reserve, wrk -t$THREADS -c$CONNS -d${DURATION}s"
    read -r pq0 ph0 pr0 < <(paysim_stats)
    c0=$(cpu_ticks "$RESERVE_PID") p0=$(cpu_ticks "$PAYSIM_PID") g0=$(pg_ticks) d0=$(cpu_ticks "$REDIS_PID")
    wrk_run "$OUT/confirm.$r" "$DURATION" confirm.lua "$OUT/holds-list.$ev" "$THREADS"
    c1=$(cpu_ticks "$RESERVE_PID") p1=$(cpu_ticks "$PAYSIM_PID") g1=$(pg_ticks) d1=$(cpu_ticks "$REDIS_PID")
    ok=$(field "$OUT/confirm.$r" ok)
    read -r pq1 ph1 pr1 < <(paysim_stats)
    PAY_REQ=$((${PAY_REQ:-0} + pq1 - pq0)) PAY_HS=$((${PAY_HS:-0} + ph1 - ph0)) PAY_RES=$((${PAY_RES:-0} + pr1 - pr0))
    U_RSV[r]=$(us_per "$c0" "$c1" "$ok") U_PAY[r]=$(us_per "$p0" "$p1" "$ok")
    U_PG[r]=$(us_per "$g0" "$g1" "$ok") U_RDS[r]=$(us_per "$d0" "$d1" "$ok")
    check_alive "the confirm run"
    dur=$(field "$OUT/confirm.$r" duration_us)
    C_RPS[r]=$(awk -v ok="$(field "$OUT/confirm.$r" ok)" -v d="$dur" 'BEGIN { printf "%.1f", ok / (d / 1e6) }')
    C_P50[r]=$(ms "$OUT/confirm.$r" p50_us) C_P99[r]=$(ms "$OUT/confirm.$r" p99_us)
    C_WP99[r]=$(ms "$OUT/confirm.$r" wrk_p99_us)
    C_NON[r]=$(($(field "$OUT/confirm.$r" requests) - $(field "$OUT/confirm.$r" ok)))
    C_CPU[r]=$(cpu_pct "$c0" "$c1" "$(awk -v d="$dur" 'BEGIN { print d / 1e6 }')")
    C_PCPU[r]=$(cpu_pct "$p0" "$p1" "$(awk -v d="$dur" 'BEGIN { print d / 1e6 }')")
    note_anomalies "confirm run $r" "$OUT/confirm.$r" holds
    C_TPC[r]=$(PGCONNECT_TIMEOUT=5 timeout 30 "${PSQL[@]}" -A -t -c "SELECT round(count(*)::numeric /
        greatest(count(DISTINCT t.checkout_id), 1), 1) FROM checkout_transitions t JOIN checkouts c
        USING (checkout_id) WHERE c.event_id = '$ev'" 2>/dev/null) || C_TPC[r]='?'
    [[ -n ${C_TPC[r]} ]] || C_TPC[r]='?'
    RATE_EST=$(awk -v a="$RATE_EST" -v b="${C_RPS[r]}" 'BEGIN { printf "%.0f", (b > a ? b : a) }')

    say "confirms $r/$REPS: pgbench -c $CONNS -j $THREADS -T $DURATION (pg_confirm.sql)"
    g0=$(pg_ticks)
    timeout -k 10 $((DURATION + 60)) pgbench -n -h 127.0.0.1 -p "$P_PG" -U onsale -c "$CONNS" \
        -j "$THREADS" -T "$DURATION" -D run="$r" -D n=0 -f "$LIB/pg_confirm.sql" onsale \
        >"$OUT/pgbench.$r" 2>&1 || { tail -n 20 "$OUT/pgbench.$r" >&2; die "pgbench failed"; }
    g1=$(pg_ticks)
    G_TPS[r]=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$OUT/pgbench.$r")
    G_LAT[r]=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$OUT/pgbench.$r")
    G_FAIL[r]=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$OUT/pgbench.$r")
    [[ -n ${G_TPS[r]} ]] || { cat "$OUT/pgbench.$r" >&2; die "pgbench printed no tps"; }
    CG_RATIO[r]=$(ratio "${C_RPS[r]}" "${G_TPS[r]}")
    U_GPG[r]=$(us_per "$g0" "$g1" "$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/pgbench.$r")")

    # The saga's own SQL, replayed: as many confirmations per client as should take about
    # DURATION seconds at 1/SAGA_COMMITS of the single-transaction rate, each on a seat of
    # its own created first.
    per=$(awk -v t="${G_TPS[r]}" -v d="$DURATION" -v c="$CONNS" -v k="$SAGA_COMMITS" 'BEGIN { n = int(t * d / k / c); print (n < 20 ? 20 : n) }')
    PGCONNECT_TIMEOUT=5 timeout 120 "${PSQL[@]}" -c "INSERT INTO seats (event_id, seat_id, section, price)
        SELECT 'bench-replay', 'r$r-' || c || '-' || n, 'R', 100
          FROM generate_series(0, $((CONNS - 1))) c, generate_series(1, $per) n ON CONFLICT DO NOTHING" \
        >"$OUT/replay-seats.$r" 2>&1 || { cat "$OUT/replay-seats.$r" >&2; die "creating the replay seats failed"; }
    say "confirms $r/$REPS: pgbench -c $CONNS -j $THREADS -t $per (pg_saga.sql, the saga's SQL replayed)"
    g0=$(pg_ticks)
    timeout -k 10 $((DURATION * SAGA_COMMITS + 120)) pgbench -n -h 127.0.0.1 -p "$P_PG" -U onsale -c "$CONNS" \
        -j "$THREADS" -t "$per" -D run="$r" -D n=0 -f "$LIB/pg_saga.sql" onsale \
        >"$OUT/pgsaga.$r" 2>&1 || { tail -n 20 "$OUT/pgsaga.$r" >&2; die "pgbench (saga replay) failed"; }
    g1=$(pg_ticks)
    X_TPS[r]=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$OUT/pgsaga.$r")
    X_FAIL[r]=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$OUT/pgsaga.$r")
    [[ -n ${X_TPS[r]} ]] || { cat "$OUT/pgsaga.$r" >&2; die "pgbench (saga replay) printed no tps"; }
    X_CONFIRMED=$(PGCONNECT_TIMEOUT=5 timeout 30 "${PSQL[@]}" -A -t -c "SELECT count(*) FROM checkouts
        WHERE event_id = 'bench-replay' AND state = 'confirmed' AND checkout_id LIKE 'co-r$r-%'")
    [[ $X_CONFIRMED == $((CONNS * per)) ]] ||
        echo "saga replay $r: $X_CONFIRMED of $((CONNS * per)) checkouts confirmed" >>"$OUT/anomalies"
    X_PG[r]=$(us_per "$g0" "$g1" "$((CONNS * per))")
    CX_RATIO[r]=$(ratio "${C_RPS[r]}" "${X_TPS[r]}")
done
ELAPSED=$((SECONDS - T_START))

# ---------------------------------------------------------------------------------------
# the reserve's own account of the run

check_alive "the benchmark"
tail -c "+$((RLOG_START + 1))" "$RLOG" >"$OUT/reserve-run.log" 2>/dev/null || true
LOG_WARN=$(grep -c ' warn: ' "$OUT/reserve-run.log" || true)
LOG_ERR=$(grep -Ec ' (error|fatal|crit): ' "$OUT/reserve-run.log" || true)
curl -s --max-time 5 --cacert "$STATE/ca.pem" "https://127.0.0.1:$((P_RESERVE + 20))/metrics" \
    >"$OUT/metrics" 2>/dev/null || true
metric() { awk -v m="$1" '$1 == m { printf "%.0f", $2 }' "$OUT/metrics"; }

# ---------------------------------------------------------------------------------------
# the table

verdict() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { ok = op == ">=" ? v >= t : v < t; print (ok ? "PASS" : "FAIL") }'; }
row() { printf '%-7s' "$1"; shift; printf ' %10s' "$@"; printf '\n'; }
sum_line() { # sum_line ARRAY-NAME…: a "median" row and a "spread" row over the arrays
    local a ref med spread meds=() spreads=()
    for a in "$@"; do
        ref="${a}[@]"
        read -r med _ _ spread < <(stats "${!ref}")
        meds+=("$(fmt "$med" 2)")
        spreads+=("$spread%")
    done
    row median "${meds[@]}"
    row spread "${spreads[@]}"
}

read -r h_med _ _ _ < <(stats "${H_RPS[@]}")
read -r r_med _ _ _ < <(stats "${R_RPS[@]}")
read -r hp99_med _ _ _ < <(stats "${H_P99[@]}")
read -r hr_med _ _ _ < <(stats "${HR_RATIO[@]}")
read -r c_med _ _ _ < <(stats "${C_RPS[@]}")
read -r g_med _ _ _ < <(stats "${G_TPS[@]}")
read -r cg_med _ _ _ < <(stats "${CG_RATIO[@]}")

REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD -- common reserve deploy 2>/dev/null || REV="$REV+local changes"
printf '\n=== onsale reserve benchmark: %s, %s cores, tree %s, build %s\n' "$(date -u +%FT%TZ)" "$(nproc)" "$REV" "$BUILD"
printf '    %s connections (wrk -t%s, pgbench -j%s), %s s per run, %s repetitions (ours, then the reference)\n' \
    "$CONNS" "$THREADS" "$THREADS" "$DURATION" "$REPS"
printf '    load average at start %s, at end %s; spread = (max - min) / median over the repetitions\n' \
    "$LOAD_START" "$(bench_load)"
printf '    services running: %s\n' "$(ONSALE_STATE=$STATE "$ROOT/deploy/onsale" status 2>/dev/null |
    awk '$2 == "running" { printf "%s%s", n++ ? ", " : "", $1 }')"
[[ -z $STACK_NOTE ]] || printf '    note: %s\n' "$STACK_NOTE"

printf '\nHOLDS  reserve: POST /v1/events/E/holds, 1 seat, every seat once, %s buyers rotating (tokens cached)\n' "$HOLD_TOKENS"
printf '       redis:   redis-benchmark SET bench:key:<rand> v NX PX 60000, -r %s, same Redis\n' "$RB_KEYSPACE"
row rep 'rsv 201/s' 'p50 ms' 'p99 ms' 'wrk p99*' 'non-201' 'rsv cpu%' 'redis/s' 'p50 ms' 'p99 ms' 'rds cpu%' ratio
for ((r = 1; r <= REPS; r++)); do
    row "$r" "$(fmt "${H_RPS[r]}")" "${H_P50[r]}" "${H_P99[r]}" "${H_WP99[r]}" "${H_NON[r]}" "${H_CPU[r]}" \
        "$(fmt "${R_RPS[r]}")" "${R_P50[r]}" "${R_P99[r]}" "${R_CPU[r]}" "${HR_RATIO[r]}"
done
sum_line H_RPS H_P50 H_P99 H_WP99 H_NON H_CPU R_RPS R_P50 R_P99 R_CPU HR_RATIO
printf '\nCPU PER HOLD  during the hold runs, CPU time / holds answered 201 (Redis %s)\n' \
    "$( ((REDIS_TLS)) && echo 'over TLS: BENCH_REDIS_TLS=1' || echo 'over plain TCP')"
row rep 'rsv µs/hold' 'redis µs/hold'
for ((r = 1; r <= REPS; r++)); do row "$r" "${H_US[r]}" "${H_REDIS_US[r]}"; done
sum_line H_US H_REDIS_US
printf '\nHOLD SCRIPT  redis-benchmark -c %s EVALSHA of the reserve'"'"'s hold script itself (prelude +\n' "$CONNS"
printf '       hold_seats.lua), the same key pattern under one {event} tag, random hold/buyer/seat ids\n'
row rep 'script/s' 'p50 ms' 'p99 ms' 'rds cpu%' 'rsv/script'
for ((r = 1; r <= REPS; r++)); do
    row "$r" "$(fmt "${S_RPS[r]}")" "${S_P50[r]}" "${S_P99[r]}" "${S_CPU[r]}" "${HS_RATIO[r]}"
done
sum_line S_RPS S_P50 S_P99 S_CPU HS_RATIO
printf '\nFLOOR  the reserve'"'"'s GET /healthz on the same kind of connections (%s s): how much of a hold is transport\n' "$FLOOR_SECONDS"
row rep 'healthz/s' 'holds/hz'
for ((r = 1; r <= REPS; r++)); do row "$r" "$(fmt "${F_RPS[r]}")" "${HF_RATIO[r]}"; done
sum_line F_RPS HF_RATIO

printf '\nFIRST USES (not in the ratio): each buyer'"'"'s first hold, token not yet cached, %s connections;\n' "$CONNS"
printf '       and the very first hold on the freshly created event (%s seats), alone\n' "$HOLD_SEATS"
row rep 'holds/s' 'p50 ms' 'p99 ms' 'rsv cpu%' '1st hold ms'
for ((r = 1; r <= REPS; r++)); do
    row "$r" "$(fmt "${K_RPS[r]}")" "${K_P50[r]}" "${K_P99[r]}" "${K_CPU[r]}" "${K_FIRST[r]}"
done
sum_line K_RPS K_P50 K_P99 K_CPU K_FIRST

printf '\nFIRST HOLDS AND REDIS, CPU per request (µs, from /proc over each run): the reserve per\n'
printf '       first hold (%s); Redis per SET NX PX and per hold script (redis-benchmark)\n' \
    "$( ((TOKEN_RECORDS)) && echo 'token proven by its gateway record' || echo 'token verified: BENCH_TOKEN_RECORDS=0')"
row rep 'rsv us/1st' 'rds us/set' 'rds us/scr'
for ((r = 1; r <= REPS; r++)); do row "$r" "${K_US[r]}" "${R_US[r]}" "${S_US[r]}"; done
sum_line K_US R_US S_US

printf '\nCONFIRMS reserve: POST /v1/holds/H/confirm, each pre-created hold once, one buyer per hold\n'
if ((PAYSIM_PID)); then
    printf '         (payment simulator in the path, charge latency %s ms: BENCH_PAYSIM_LATENCY_MS)\n' "$PAYSIM_LATENCY"
fi
printf '         pgbench: BEGIN; INSERT checkout; INSERT booking; INSERT booking item; END (bench_* tables)\n'
row rep 'rsv 201/s' 'p50 ms' 'p99 ms' 'wrk p99*' 'non-201' 'rsv cpu%' 'pay cpu%' 'steps/cf' 'holds' 'pg tps' 'pg avg ms' 'pg failed' ratio
for ((r = 1; r <= REPS; r++)); do
    row "$r" "$(fmt "${C_RPS[r]}")" "${C_P50[r]}" "${C_P99[r]}" "${C_WP99[r]}" "${C_NON[r]}" "${C_CPU[r]}" \
        "${C_PCPU[r]}" "${C_TPC[r]}" "${C_N[r]}" "$(fmt "${G_TPS[r]}")" "${G_LAT[r]}" "${G_FAIL[r]:-?}" "${CG_RATIO[r]}"
done
sum_line C_RPS C_P50 C_P99 C_WP99 C_NON C_CPU C_PCPU C_TPC C_N G_TPS G_LAT G_FAIL CG_RATIO
printf '\np50/p99: each request timed by the Lua script; * wrk p99: wrk'"'"'s own figure, inflated by its\n'
printf 'coordinated-omission correction (loadgen/bench/reserve/common.lua says how); cpu%%: of one core;\n'
printf 'steps/cf: checkout_transitions rows per confirmed checkout (the saga'"'"'s committed steps).\n'

printf '\nCONFIRMS, CPU per confirmation (µs, from /proc over each run) and the saga'"'"'s SQL replayed\n'
printf '         replay: pgbench -f pg_saga.sql, the %s autocommit statements of one confirmation\n' "$SAGA_COMMITS"
row rep 'rsv us/cf' 'pg us/cf' 'redis us' 'pay us/cf' 'pg us/tx1' 'replay/s' 'pg us/rp' 'rp failed' 'rsv/replay' 'rsv/pg cpu'
for ((r = 1; r <= REPS; r++)); do
    row "$r" "${U_RSV[r]}" "${U_PG[r]}" "${U_RDS[r]}" "${U_PAY[r]}" "${U_GPG[r]}" "$(fmt "${X_TPS[r]}")" \
        "${X_PG[r]}" "${X_FAIL[r]:-?}" "${CX_RATIO[r]}" "$(ratio "${U_RSV[r]}" "${U_PG[r]}")"
done
sum_line U_RSV U_PG U_RDS U_PAY U_GPG X_TPS X_PG X_FAIL CX_RATIO
printf 'rsv/pg us/cf: during the reserve'"'"'s run; pg us/tx1: Postgres per single-transaction reference\n'
printf 'confirmation; pg us/rp: per replayed confirmation; rsv/replay: reserve 201/s over replay/s.\n'
printf 'Who saturates: the process whose CPU per confirmation times the rate nears one core.\n'
printf 'paysim during the reserve'"'"'s confirm runs: %s requests over %s TLS handshakes (%s resumed)\n' \
    "${PAY_REQ:-0}" "${PAY_HS:-0}" "${PAY_RES:-0}"

printf '\nRESULT (medians)\n'
printf '  holds:    reserve %s/s vs Redis SET NX PX %s/s  ratio %s  (target >= 0.50: %s)\n' \
    "$(fmt "$h_med")" "$(fmt "$r_med")" "$(fmt "$hr_med" 3)" "$(verdict "$hr_med" '>=' 0.5)"
printf '            hold p99 %s ms  (target < 20 ms: %s)\n' "$(fmt "$hp99_med" 2)" "$(verdict "$hp99_med" '<' 20)"
printf '  confirms: reserve %s/s vs pgbench %s tps  ratio %s  (target >= 0.50: %s)\n' \
    "$(fmt "$c_med")" "$(fmt "$g_med")" "$(fmt "$cg_med" 3)" "$(verdict "$cg_med" '>=' 0.5)"
read -r hs_med _ _ _ < <(stats "${HS_RATIO[@]}")
printf '  holds:    reserve vs the hold script under redis-benchmark: ratio %s  (target >= 0.50: %s)\n' \
    "$(fmt "$hs_med" 3)" "$(verdict "$hs_med" '>=' 0.5)"
printf '  (ratio of medians: holds %s, confirms %s)\n' "$(ratio "$h_med" "$r_med")" "$(ratio "$c_med" "$g_med")"
read -r x_med _ _ _ < <(stats "${X_TPS[@]}")
read -r ur_med _ _ _ < <(stats "${U_RSV[@]}")
read -r up_med _ _ _ < <(stats "${U_PG[@]}")
printf '  confirms: reserve vs pgbench single transaction ratio %s  (issue 9 target >= 0.30: %s)\n' \
    "$(fmt "$cg_med" 3)" "$(verdict "$cg_med" '>=' 0.3)"
printf '  confirms: reserve vs the saga SQL replayed %s/s: ratio %s; CPU per confirmation reserve %s µs, Postgres %s µs\n' \
    "$(fmt "$x_med")" "$(ratio "$c_med" "$x_med")" "$ur_med" "$up_med"

printf '\nRESERVE during the run (%s s): alive; log: %s warn, %s error lines' "$ELAPSED" "$LOG_WARN" "$LOG_ERR"
printf '; metrics: holds %s, conflicts %s, confirmations %s, invalid tokens %s, backend errors %s, uniqueness conflicts %s\n' \
    "$(metric onsale_reserve_holds_total)" "$(metric onsale_reserve_hold_conflicts_total)" \
    "$(metric onsale_reserve_confirmations_total)" "$(metric onsale_reserve_invalid_tokens_total)" \
    "$(metric onsale_reserve_backend_errors_total)" "$(metric onsale_reserve_uniqueness_conflicts_total)"
printf '  first holds by token record (docs/tokens.md): matched %s, missing (verified instead) %s\n' \
    "$(metric 'onsale_reserve_token_records_total{result="matched"}')" \
    "$(metric 'onsale_reserve_token_records_total{result="missing"}')"
if ((LOG_WARN + LOG_ERR > 0)); then
    printf '  most frequent warn/error messages (timestamps and ids stripped):\n'
    grep -E ' (warn|error|fatal|crit): ' "$OUT/reserve-run.log" |
        sed -E 's/^[^ ]+ reserve\[[0-9]+\] //; s/[0-9a-f]{16,}/<id>/g; s/[0-9]+/<n>/g' |
        sort | uniq -c | sort -rn | head -n 5 | sed 's/^/  /'
fi
if [[ -s $OUT/anomalies ]]; then
    printf 'ANOMALIES\n'
    sed 's/^/  /' "$OUT/anomalies"
else
    printf 'ANOMALIES none: every measured request answered 201, no socket errors, no batch ran dry\n'
fi
((KEEP)) && printf 'outputs kept in %s\n' "$OUT"
exit 0
