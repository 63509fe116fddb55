#!/usr/bin/env bash
# loadgen/bench/bench_gateway.sh — the gateway measured side by side with nginx (issue 3).
#
# In one run, on a private stack (deploy/onsale up in a temporary state dir, free ports)
# and a private nginx (generated config in the same temp dir, the stack's server cert):
#
#   status   wrk, keep-alive TLS, GET /q/E/status with valid tickets (from real joins,
#            rotating; Authorization: Bearer) on a paused room, so every answer is the
#            "queued" hot path: ticket HMAC + cached watermark, no Redis
#     vs     nginx over TLS answering the same path with a fixed JSON body — the very
#            bytes of one of the gateway's status answers
#   joins    wrk, keep-alive TLS, POST /q/E/join without a ticket (a new place each:
#            Redis INCR script + a signed ticket)
#     vs     nginx answering the same POST with the bytes of one of the gateway's joins
#   tls      wrk with `Connection: close`: every request a new TCP connection and a full
#            TLS handshake (wrk does not resume sessions) plus one status poll
#     vs     nginx, the same
#
# The same wrk script, threads, connections and duration drive both sides of each pair.
# Each pair runs REPS times, ours then nginx, so both see the same machine; the table
# gives every repetition, the medians and the ratios against the targets of issue 3
# (status ≥ 0.8× nginx with p99 < 10 ms; joins ≥ 0.3× nginx; new TLS connections ≥ 0.8×
# nginx). Ratios, not absolute figures, are the result.
#
# --workers N runs the gateway with N workers (event loops) and nginx with N worker
# processes (default 1 and 1: one event loop against one; --nginx-workers W|auto sets
# nginx's alone). Every row also gives the CPU microseconds per answered request of each
# side, from the processes' own CPU time over the run (/proc/<pid>/stat, user + system):
# on a machine shared with other work, that is the figure to trust. The joins table adds
# Redis' CPU microseconds per join (join.lua runs there for every join: the other half of
# a join's cost, which the gateway's figure does not include).
#
# --count adds, after the measured runs, one counting run per side of the status and
# joins pairs: system calls per answered request (strace -c -f attached to the gateway
# and to nginx's workers) and allocation calls (malloc + calloc + realloc of glibc,
# counted by perf stat on uprobes; needs root and, once per machine,
# `perf probe -x <libc.so.6> -a malloc -a calloc -a realloc`; without those probes the
# column says n/a). Counting runs are slowed by strace: their req/s mean nothing, their
# per-request counts do.
#
# --dpop creates both rooms with "dpop": true and joins with a DPoP header (one proof,
# made once by tickets.py: a join only reads the key from it), so the status rows poll
# tickets bound to a key (the longer, version 2 ticket) and the join rows pay for reading
# the proof's key; without it the rooms say "dpop": false (the default of loadgen).
#
# --pow adds, after the joins pair, REPS back-to-back runs of the gateway alone: joins of a
# room with proof of work off, of one with it on where each join carries a proof made
# beforehand (proofs.py: the join alone, as a browser makes it with the challenge its page
# came with), and of the same room as an API client joins it (a GET /q/E/challenge, then
# the join). The off and on runs send the very same requests (join_pow.lua with the same
# proofs; a room with proof of work off ignores the header): wrk shares the two cores with
# the gateway and Redis, so a client that worked harder in one run would slow the gateway's
# loop there and raise its CPU per join for reasons of its own. The pow-off room is a
# room of its own, made with the pow-on one: the joins pairs' room, with their hundreds
# of thousands of places behind it, measured 1 µs a join dearer on the gateway and 0.45
# µs on Redis. Difficulty 0: wrk does no hashing, the gateway all of
# its checking. It prints the gateway's and Redis' CPU microseconds per join of each and
# the ratios: what proof of work adds to a join (docs/design.md, "Bot defences").
#
# --enqueue adds, the same way, REPS back-to-back runs of joins by a browser (no token) and
# by the sale site's customers (each join with the Onsale-Enqueue token of a customer of
# its own, signed beforehand by enqueue_tokens.py with the stack's sale-site key), each in
# a fresh room of its own, sending the same requests otherwise: what a customer's place
# costs the gateway (the ES256 verification, the longer ticket) and Redis (join.lua one
# by one with the customers' hash, where a browser's join is numbered in a batch).
#
# Usage: loadgen/bench/bench_gateway.sh [--skip-build] [--reps N] [--duration S]
#            [--connections C] [--threads T] [--tickets N] [--workers N]
#            [--nginx-workers W|auto] [--count] [--keep] [--dpop] [--pow] [--enqueue]
# Environment: ONSALE_BUILD (build dir, default <checkout>/build), ONSALE_SKIP_BUILD=1.
# Needs: wrk, nginx, curl, openssl, python3, a build with gateway/onsale-gateway.
# Exit status: 0 measured (whatever the verdicts), 1 the benchmark could not run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
LIB=$ROOT/loadgen/bench/gateway
PROG=bench_gateway
# shellcheck source=loadgen/bench/lib.sh
. "$ROOT/loadgen/bench/lib.sh"

REPS=3
DURATION=10   # seconds per measured run
CONNS=50      # concurrent connections, ours and nginx alike
THREADS=2     # wrk threads
TICKETS=5000  # distinct tickets rotating in the status runs
NGINX_WORKERS=
WORKERS=1
SKIP_BUILD=${ONSALE_SKIP_BUILD:-0}
KEEP=0
COUNT=0
DPOP=false
POW=0
ENQUEUE=0
BUILD=${ONSALE_BUILD:-$ROOT/build}

while (($#)); do
    case $1 in
    --skip-build) SKIP_BUILD=1 ;;
    --count) COUNT=1 ;;
    --pow) POW=1 ;;
    --enqueue) ENQUEUE=1 ;;
    --reps) REPS=${2:?}; shift ;;
    --duration) DURATION=${2:?}; shift ;;
    --connections) CONNS=${2:?}; shift ;;
    --threads) THREADS=${2:?}; shift ;;
    --tickets) TICKETS=${2:?}; shift ;;
    --nginx-workers) NGINX_WORKERS=${2:?}; shift ;;
    --workers) WORKERS=${2:?}; shift ;;
    --keep) KEEP=1 ;;
    --dpop) DPOP=true ;;
    -h | --help) bench_usage; exit 0 ;;
    *) printf '%s: unknown argument %s (try --help)\n' "$PROG" "$1" >&2; exit 1 ;;
    esac
    shift
done
bench_positive REPS DURATION CONNS THREADS TICKETS
((DURATION <= 120)) || { printf '%s: --duration is at most 120 s\n' "$PROG" >&2; exit 1; }
((REPS <= 9)) || { printf '%s: --reps is at most 9\n' "$PROG" >&2; exit 1; }
[[ $WORKERS =~ ^[1-9][0-9]?$ ]] || { printf '%s: --workers is a number (1-99)\n' "$PROG" >&2; exit 1; }
NGINX_WORKERS=${NGINX_WORKERS:-$WORKERS} # the same number of event loops on both sides
[[ $NGINX_WORKERS == auto || $NGINX_WORKERS =~ ^[1-9][0-9]?$ ]] ||
    { printf '%s: --nginx-workers is a number or auto\n' "$PROG" >&2; exit 1; }
((CONNS >= THREADS)) || THREADS=$CONNS

bench_need 'apt-get install wrk nginx-light curl openssl python3' wrk nginx curl openssl python3 timeout awk
NGINX=$(command -v nginx)

# ---------------------------------------------------------------------------------------
# the stack and nginx, and cleaning both up whatever happens

bench_workdir onsale-gwbench
NGX=$WORK/nginx
mkdir -p "$NGX/tmp"
NGINX_PID=
GLOG=$STATE/log/gateway.log

onsale() {
    # join_rate_per_ip=0: every join of the benchmark comes from 127.0.0.1; proof of work
    # at difficulty 0 that never rises (only the --pow room asks for it); no access lines,
    # like the nginx it is held against (access_log off; ONSALE_GATEWAY_ACCESS_LOG=true
    # measures what they cost)
    ONSALE_GATEWAY_ACCESS_LOG=${ONSALE_GATEWAY_ACCESS_LOG:-false} ONSALE_GATEWAY_POW_BASE_BITS=0 ONSALE_GATEWAY_POW_MAX_BITS=0 \
        ONSALE_GATEWAY_POW_BLOCK_FREE_PER_MIN=0 ONSALE_GATEWAY_POW_TOTAL_FREE_PER_MIN=0 \
        ONSALE_GATEWAY_JOIN_RATE_PER_IP=0 ONSALE_GATEWAY_WORKERS=$WORKERS bench_onsale "$@"
}

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    if [[ -n $NGINX_PID ]]; then
        kill -QUIT "$NGINX_PID" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$NGINX_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$NGINX_PID" 2>/dev/null || true
    fi
    bench_log_tail "$rc" "$GLOG" gateway
    bench_finish "$rc" "state, logs, wrk outputs, nginx.conf"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The stack's five ports and nginx's, six distinct free loopback ports (bound together,
# so no two are equal).
pick_ports() {
    read -r P_RESERVE P_REDIS P_PG P_GATEWAY P_PAYSIM P_NGINX < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(6)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
}

bench_build
[[ -x $BUILD/gateway/onsale-gateway ]] || die "$BUILD has no gateway/onsale-gateway"
bench_up pick_ports
[[ -s $STATE/run/gateway.pid ]] || die "deploy/onsale up did not start the gateway (see $OUT/stack.log)"
GW=https://127.0.0.1:$P_GATEWAY
NG=https://127.0.0.1:$P_NGINX
CA=$STATE/ca.pem
GATEWAY_PID=$(cat "$STATE/run/gateway.pid")
REDIS_PID=$(cat "$STATE/run/redis.pid" 2>/dev/null || echo 0) # a join's other half: its script
GLOG_START=$(stat -c %s "$GLOG" 2>/dev/null || echo 0)

# ---------------------------------------------------------------------------------------
# helpers

gateway_alive() {
    [[ -r /proc/$GATEWAY_PID/cmdline ]] && tr '\0' ' ' <"/proc/$GATEWAY_PID/cmdline" | grep -q onsale-gateway
}
check_alive() { gateway_alive || die "the gateway (pid $GATEWAY_PID) died during $1"; }


# room EVENT [POW]: a paused FIFO waiting room (nobody is admitted: status polls stay
# "queued"), with proof of work off unless POW is true.
room() {
    local code
    code=$(gw_admin PUT "/admin/events/$1" "{\"rate_per_minute\":60,\"max_active\":0,\"paused\":true,\"mode\":\"fifo\",\"dpop\":$DPOP,\"pow\":${2:-false}}")
    [[ $code == 200 || $code == 201 ]] ||
        die "PUT /admin/events/$1 answered '$code': $(head -c 300 "$OUT/admin_body" 2>/dev/null)"
}

# wrk_run OUTFILE URL SCRIPT ARGS…: one measured, bounded wrk run.
wrk_run() {
    local out=$1 url=$2 script=$3
    shift 3
    timeout -k 10 -s INT $((DURATION + 60)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" \
        --timeout 5s --latency -s "$LIB/$script" "$url" -- "$@" >"$out" 2>&1 || true
    grep -q '^RESULT ' "$out" || { cat "$out" >&2; die "wrk ($script against $url) printed no result"; }
}

# note_anomalies LABEL FILE OK: remembers unexpected answers and socket errors of a run.
note_anomalies() {
    local label=$1 f=$2 ok=$3 codes errs
    codes=$(field "$f" codes)
    errs="connect $(field "$f" connect_errors), read $(field "$f" read_errors), write $(field "$f" write_errors), timeouts $(field "$f" timeouts)"
    if [[ $codes != "$ok":* || $codes == *,* || $errs != "connect 0, read 0, write 0, timeouts 0" ]]; then
        printf '%s: answers %s; socket errors: %s\n' "$label" "$codes" "$errs" >>"$OUT/anomalies"
        sed -n 's/^SAMPLE /    e.g. /p' "$f" >>"$OUT/anomalies"
    fi
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'; }

# tls_params PORT: the negotiated protocol and cipher (for the record).
tls_params() {
    openssl s_client -connect "127.0.0.1:$1" -CAfile "$CA" -brief </dev/null 2>&1 |
        awk -F': ' '/^Protocol version/ { p = $2 } /^Ciphersuite/ { c = $2 } END { print p, c }'
}

: >"$OUT/anomalies"

# ---------------------------------------------------------------------------------------
# waiting rooms, tickets, and the bodies nginx will serve

EV_S=bench-status
EV_J=bench-join
EV_P=bench-join-pow
EV_O=bench-join-nopow # the pow-off side of --pow: a room as fresh as EV_P
room "$EV_S"
room "$EV_J"
EV_C=bench-join-customers
EV_B=bench-join-browsers # the no-token side of --enqueue: a room as fresh as EV_C
if ((POW)); then
    room "$EV_P" true
    room "$EV_O"
fi
if ((ENQUEUE)); then
    room "$EV_C"
    room "$EV_B"
fi
say "joining $EV_S $TICKETS times for the status runs' tickets"
timeout 300 python3 "$LIB/tickets.py" --port "$P_GATEWAY" --ca "$CA" --event "$EV_S" \
    --count "$TICKETS" --sample "$OUT/join_body" --dpop "$DPOP" --proof-out "$OUT/proof" \
    >"$OUT/tickets" ||
    die "joining $EV_S failed (is join_rate_per_ip=0 honoured? see above)"
first=$(head -n 1 "$OUT/tickets")
code=$(printf 'header = "Authorization: Bearer %s"\n' "$first" |
    curl -s -K - -o "$OUT/status_body" -w '%{http_code}' --max-time 10 --cacert "$CA" \
        "$GW/q/$EV_S/status") || true
[[ $code == 200 ]] || die "GET /q/$EV_S/status answered '$code': $(head -c 300 "$OUT/status_body")"
grep -q '"state":"queued"' "$OUT/status_body" ||
    die "the status answer is not 'queued': $(head -c 300 "$OUT/status_body")"

# nginx_str FILE: the file as an nginx single-quoted string (refuses what needs escaping).
nginx_str() {
    local s
    s=$(tr -d '\n' <"$1")
    [[ $s != *"'"* && $s != *\\* && $s != *'$'* ]] || die "$1 holds characters nginx would interpret"
    printf "'%s'" "$s"
}

cat >"$NGX/nginx.conf" <<EOF
# generated by bench_gateway.sh: the reference server of the gateway benchmark
daemon off;
master_process on;
worker_processes $NGINX_WORKERS;
pid $NGX/nginx.pid;
error_log $NGX/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    server_tokens off;
    keepalive_timeout 60s;
    keepalive_requests 100000000;
    client_body_temp_path $NGX/tmp/body;
    proxy_temp_path $NGX/tmp/proxy;
    fastcgi_temp_path $NGX/tmp/fastcgi;
    uwsgi_temp_path $NGX/tmp/uwsgi;
    scgi_temp_path $NGX/tmp/scgi;
    ssl_session_cache shared:bench:10m;
    ssl_session_tickets on;
    server {
        listen 127.0.0.1:$P_NGINX ssl;
        ssl_certificate $STATE/server.pem;
        ssl_certificate_key $STATE/server-key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        default_type application/json;
        add_header Cache-Control no-store;
        location = /q/$EV_S/status { return 200 $(nginx_str "$OUT/status_body"); }
        location = /q/$EV_J/join { return 201 $(nginx_str "$OUT/join_body"); }
        location / { return 404; }
    }
}
EOF
"$NGINX" -t -c "$NGX/nginx.conf" -p "$NGX" -e "$NGX/error.log" >"$OUT/nginx-t.log" 2>&1 ||
    { cat "$OUT/nginx-t.log" >&2; die "nginx -t refused the generated config"; }
(
    cd /
    exec setsid "$NGINX" -c "$NGX/nginx.conf" -p "$NGX" -e "$NGX/error.log"
) </dev/null >>"$OUT/nginx.out" 2>&1 &
NGINX_PID=$!
for ((i = 0; i < 100; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$CA" "$NG/q/$EV_S/status") || true
    [[ $code == 200 ]] && break
    kill -0 "$NGINX_PID" 2>/dev/null || { cat "$NGX/error.log" >&2; die "nginx exited"; }
    sleep 0.1
done
[[ $code == 200 ]] || die "nginx did not answer on :$P_NGINX"
mapfile -t NGINX_WORKER_PIDS < <(pgrep -P "$NGINX_PID")
say "nginx on :$P_NGINX (master $NGINX_PID, workers ${NGINX_WORKER_PIDS[*]})"
GW_TLS=$(tls_params "$P_GATEWAY")
NG_TLS=$(tls_params "$P_NGINX")

# ---------------------------------------------------------------------------------------
# the measurements

# measure KIND REP SIDE URL SCRIPT OK ARGS…: one run; sets RPS/P50/P99/CPU of KIND.SIDE[REP]
declare -A RPS P50 P99 CPU US USX RUS
measure() {
    local kind=$1 r=$2 side=$3 url=$4 script=$5 ok=$6 f c0 c1 r0 r1 dur pids
    shift 6
    f=$OUT/$kind.$side.$r
    if [[ $side == gw ]]; then pids=("$GATEWAY_PID"); else pids=("${NGINX_WORKER_PIDS[@]}"); fi
    say "$kind $r/$REPS: $([[ $side == gw ]] && echo gateway || echo nginx), wrk -t$THREADS -c$CONNS -d${DURATION}s"
    c0=$(cpu_ticks "${pids[@]}")
    r0=$(cpu_ticks "$REDIS_PID")
    wrk_run "$f" "$url" "$script" "$@"
    c1=$(cpu_ticks "${pids[@]}")
    r1=$(cpu_ticks "$REDIS_PID")
    [[ $side == gw ]] && check_alive "the $kind run"
    dur=$(field "$f" duration_us)
    RPS[$kind.$side.$r]=$(awk -v ok="$(field "$f" ok)" -v d="$dur" 'BEGIN { printf "%.0f", ok / (d / 1e6) }')
    P50[$kind.$side.$r]=$(ms "$(field "$f" p50_us)")
    P99[$kind.$side.$r]=$(ms "$(field "$f" p99_us)")
    CPU[$kind.$side.$r]=$(cpu_pct "$c0" "$c1" "$(awk -v d="$dur" 'BEGIN { print d / 1e6 }')")
    US[$kind.$side.$r]=$(awk -v a="$c0" -v b="$c1" -v ok="$(field "$f" ok)" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.0f", (ok > 0 ? (b - a) / hz * 1e6 / ok : 0) }')
    USX[$kind.$side.$r]=$(awk -v a="$c0" -v b="$c1" -v ok="$(field "$f" ok)" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.1f", (ok > 0 ? (b - a) / hz * 1e6 / ok : 0) }')
    RUS[$kind.$side.$r]=$(awk -v a="$r0" -v b="$r1" -v ok="$(field "$f" ok)" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.1f", (ok > 0 ? (b - a) / hz * 1e6 / ok : 0) }')
    note_anomalies "$kind $side run $r" "$f" "$ok"
}

T_START=$SECONDS
LOAD_START=$(bench_load)
for ((r = 1; r <= REPS; r++)); do
    measure status "$r" gw "$GW" status.lua 200 "/q/$EV_S/status" "$OUT/tickets"
    measure status "$r" ng "$NG" status.lua 200 "/q/$EV_S/status" "$OUT/tickets"
done
for ((r = 1; r <= REPS; r++)); do
    measure joins "$r" gw "$GW" join.lua 201 "/q/$EV_J/join" "$OUT/proof"
    measure joins "$r" ng "$NG" join.lua 201 "/q/$EV_J/join" "$OUT/proof"
done
if ((POW)); then # back to back: pow off, pow on, the gateway alone
    for ((r = 1; r <= REPS; r++)); do
        # twice the joins the pow-off run answered: never short of fresh proofs
        n=$(awk -v j="$(field "$OUT/joins.gw.1" ok)" 'BEGIN { printf "%d", (j > 0 ? j : 100000) * 2 }')
        python3 "$LIB/proofs.py" --secret "$STATE/keys/ticket-secret" --event "$EV_P" \
            --count "$n" >"$OUT/proofs.$r" || die "proofs.py failed"
        # odd reps run off first, even reps on first: the run right after proofs.py
        # measured slower (+0.5 to 1 µs a join, whichever it was), and alternating
        # cancels that in the medians
        if ((r % 2)); then
            measure powoff "$r" gw "$GW" join_pow.lua 201 "/q/$EV_O/join" "$OUT/proofs.$r" "$THREADS"
            measure powon "$r" gw "$GW" join_pow.lua 201 "/q/$EV_P/join" "$OUT/proofs.$r" "$THREADS"
        else
            measure powon "$r" gw "$GW" join_pow.lua 201 "/q/$EV_P/join" "$OUT/proofs.$r" "$THREADS"
            measure powoff "$r" gw "$GW" join_pow.lua 201 "/q/$EV_O/join" "$OUT/proofs.$r" "$THREADS"
        fi
        measure powch "$r" gw "$GW" join_pow.lua 201 "/q/$EV_P/join"
    done
fi
if ((ENQUEUE)); then # back to back: browsers, customers, the gateway alone
    for ((r = 1; r <= REPS; r++)); do
        n=$(awk -v j="$(field "$OUT/joins.gw.1" ok)" 'BEGIN { printf "%d", (j > 0 ? j : 50000) }')
        # Debian's python3, with python3-jwt and python3-cryptography (docs/examples/enqueue.py)
        /usr/bin/python3 "$LIB/enqueue_tokens.py" --key "$STATE/keys/sale-site-key.pem" --event "$EV_C" \
            --count "$n" --prefix "r$r-" >"$OUT/enqueue.$r" || die "enqueue_tokens.py failed"
        if ((r % 2)); then # alternate which goes first, as --pow does
            measure enqoff "$r" gw "$GW" join.lua 201 "/q/$EV_B/join" "$OUT/proof"
            measure enqon "$r" gw "$GW" join_pow.lua 201 "/q/$EV_C/join" "$OUT/enqueue.$r" \
                "$THREADS" Onsale-Enqueue
        else
            measure enqon "$r" gw "$GW" join_pow.lua 201 "/q/$EV_C/join" "$OUT/enqueue.$r" \
                "$THREADS" Onsale-Enqueue
            measure enqoff "$r" gw "$GW" join.lua 201 "/q/$EV_B/join" "$OUT/proof"
        fi
    done
fi
for ((r = 1; r <= REPS; r++)); do
    measure tls "$r" gw "$GW" status.lua 200 "/q/$EV_S/status" "$OUT/tickets" close
    measure tls "$r" ng "$NG" status.lua 200 "/q/$EV_S/status" "$OUT/tickets" close
done
ALLOC_EVENTS=probe_libc:malloc,probe_libc:calloc,probe_libc:realloc
have_alloc_probes() { (($(perf list 2>/dev/null | grep -c 'probe_libc:malloc') > 0)); }

# count_run KIND SIDE URL SCRIPT ARGS…: syscalls and allocations per answered request.
declare -A SYS ALLOC TOPSYS
count_run() {
    local kind=$1 side=$2 url=$3 script=$4 f pids ppid='' spid sargs=() p ok
    shift 4
    f=$OUT/count.$kind.$side
    if [[ $side == gw ]]; then pids=("$GATEWAY_PID"); else pids=("${NGINX_WORKER_PIDS[@]}"); fi
    for p in "${pids[@]}"; do sargs+=(-p "$p"); done
    say "counting $kind: $([[ $side == gw ]] && echo gateway || echo nginx) under strace"
    if have_alloc_probes; then
        perf stat -x, -e "$ALLOC_EVENTS" -p "$(
            IFS=,
            echo "${pids[*]}"
        )" -o "$f.perf" &
        ppid=$!
    fi
    strace -f -c -S calls -o "$f.strace" "${sargs[@]}" 2>"$f.strace.err" &
    spid=$!
    sleep 1
    wrk_run "$f" "$url" "$script" "$@"
    kill -INT "$spid" ${ppid:+"$ppid"} 2>/dev/null || true
    wait "$spid" ${ppid:+"$ppid"} 2>/dev/null || true
    ok=$(field "$f" ok)
    SYS[$kind.$side]=$(awk -v ok="$ok" '$NF == "total" { printf "%.1f", (ok > 0 ? $4 / ok : 0) }' "$f.strace")
    TOPSYS[$kind.$side]=$(awk -v ok="$ok" 'NR > 2 && $1 !~ /^-/ && $NF != "total" && ok > 0 {
        printf "%s %.2f, ", $NF, $4 / ok }' "$f.strace" | head -c 400)
    if [[ -n $ppid && -s $f.perf ]]; then
        ALLOC[$kind.$side]=$(awk -F, -v ok="$ok" '$3 ~ /probe_libc/ { t += $1 } END { printf "%.1f", (ok > 0 ? t / ok : 0) }' "$f.perf")
    else
        ALLOC[$kind.$side]=n/a
    fi
}
if ((COUNT)); then
    command -v strace >/dev/null || die "--count needs strace"
    count_run status gw "$GW" status.lua "/q/$EV_S/status" "$OUT/tickets"
    count_run status ng "$NG" status.lua "/q/$EV_S/status" "$OUT/tickets"
    count_run joins gw "$GW" join.lua "/q/$EV_J/join"
    count_run joins ng "$NG" join.lua "/q/$EV_J/join"
fi
ELAPSED=$((SECONDS - T_START))
check_alive "the benchmark"
tail -c "+$((GLOG_START + 1))" "$GLOG" >"$OUT/gateway-run.log" 2>/dev/null || true
LOG_WARN=$(grep -c ' warn: ' "$OUT/gateway-run.log" || true)
LOG_ERR=$(grep -Ec ' (error|fatal|crit): ' "$OUT/gateway-run.log" || true)

# ---------------------------------------------------------------------------------------
# the table

verdict() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { ok = op == ">=" ? v >= t : v < t; print (ok ? "PASS" : "FAIL") }'; }

declare -A MED
printf '\nonsale gateway vs nginx — %s, %d cores, load before %s\n' "$(date -u +%FT%TZ)" "$(nproc)" "$LOAD_START"
printf 'wrk -t%d -c%d -d%ds, keep-alive unless noted, %d repetitions (ours, then nginx); gateway %s worker(s), nginx %s worker(s)\n' \
    "$THREADS" "$CONNS" "$DURATION" "$REPS" "$WORKERS" "$NGINX_WORKERS"
printf 'TLS: gateway %s; nginx %s\n' "$GW_TLS" "$NG_TLS"
printf 'status: %d distinct tickets, paused room (every answer "queued"), body %d bytes on both sides\n\n' \
    "$TICKETS" "$(wc -c <"$OUT/status_body")"
for kind in status joins tls; do
    case $kind in
    status) title="GET /q/E/status, valid tickets" ;;
    joins) title="POST /q/E/join, a new place each" ;;
    tls) title="new TLS connections (Connection: close, one status poll each)" ;;
    esac
    printf '%s\n' "$title"
    printf '  %-6s %10s %8s %8s %5s %6s | %10s %8s %8s %5s %6s | %6s\n' rep 'gw req/s' 'p50 ms' \
        'p99 ms' 'cpu%' 'us/req' 'nginx r/s' 'p50 ms' 'p99 ms' 'cpu%' 'us/req' ratio
    for side in gw ng; do
        for m in RPS P50 P99 US; do
            vals=()
            for ((r = 1; r <= REPS; r++)); do
                ref="${m}[$kind.$side.$r]"
                vals+=("${!ref}")
            done
            MED[$m.$kind.$side]=$(median "${vals[@]}")
        done
    done
    for ((r = 1; r <= REPS; r++)); do
        printf '  %-6s %10s %8s %8s %5s %6s | %10s %8s %8s %5s %6s | %6s\n' "$r" \
            "${RPS[$kind.gw.$r]}" "${P50[$kind.gw.$r]}" "${P99[$kind.gw.$r]}" "${CPU[$kind.gw.$r]}" \
            "${US[$kind.gw.$r]}" \
            "${RPS[$kind.ng.$r]}" "${P50[$kind.ng.$r]}" "${P99[$kind.ng.$r]}" "${CPU[$kind.ng.$r]}" \
            "${US[$kind.ng.$r]}" "$(ratio "${RPS[$kind.gw.$r]}" "${RPS[$kind.ng.$r]}")"
    done
    printf '  %-6s %10s %8s %8s %5s %6s | %10s %8s %8s %5s %6s | %6s\n\n' median \
        "${MED[RPS.$kind.gw]}" "${MED[P50.$kind.gw]}" "${MED[P99.$kind.gw]}" '' "${MED[US.$kind.gw]}" \
        "${MED[RPS.$kind.ng]}" "${MED[P50.$kind.ng]}" "${MED[P99.$kind.ng]}" '' "${MED[US.$kind.ng]}" \
        "$(ratio "${MED[RPS.$kind.gw]}" "${MED[RPS.$kind.ng]}")"
    if [[ $kind == joins ]]; then # Redis runs join.lua for each: its CPU is the join's too
        vals=()
        for ((r = 1; r <= REPS; r++)); do vals+=("${RUS[joins.gw.$r]}"); done
        printf '  Redis CPU us per join (join.lua; not in the gateway figure): %s, median %s\n\n' \
            "${vals[*]}" "$(median "${vals[@]}")"
    fi
done

if ((POW)); then
    printf 'proof of work on join (gateway alone, back to back; CPU us per answered join)\n'
    printf '  %-4s %9s %6s %6s | %9s %6s %6s | %9s %6s %6s\n' rep 'off j/s' 'gw us' 'redis' \
        'on j/s' 'gw us' 'redis' '+GET j/s' 'gw us' 'redis'
    offs=() ons=() chs=() roffs=() rons=()
    for ((r = 1; r <= REPS; r++)); do
        offs+=("${USX[powoff.gw.$r]}")
        ons+=("${USX[powon.gw.$r]}")
        chs+=("${USX[powch.gw.$r]}")
        roffs+=("${RUS[powoff.gw.$r]}")
        rons+=("${RUS[powon.gw.$r]}")
        printf '  %-4s %9s %6s %6s | %9s %6s %6s | %9s %6s %6s\n' "$r" "${RPS[powoff.gw.$r]}" \
            "${USX[powoff.gw.$r]}" "${RUS[powoff.gw.$r]}" "${RPS[powon.gw.$r]}" \
            "${USX[powon.gw.$r]}" "${RUS[powon.gw.$r]}" "${RPS[powch.gw.$r]}" \
            "${USX[powch.gw.$r]}" "${RUS[powch.gw.$r]}"
    done
    printf '  median gateway us per join: off %s, on %s (%s×), on with a GET /challenge each %s (%s×)\n' \
        "$(median "${offs[@]}")" "$(median "${ons[@]}")" \
        "$(ratio "$(median "${ons[@]}")" "$(median "${offs[@]}")")" "$(median "${chs[@]}")" \
        "$(ratio "$(median "${chs[@]}")" "$(median "${offs[@]}")")"
    printf '  median Redis us per join: off %s, on %s\n\n' "$(median "${roffs[@]}")" "$(median "${rons[@]}")"
fi

if ((ENQUEUE)); then
    printf 'customers (enqueue tokens) against browsers (gateway alone, back to back; CPU us per answered join)\n'
    printf '  %-4s %9s %6s %6s | %9s %6s %6s\n' rep 'brw j/s' 'gw us' 'redis' 'cust j/s' 'gw us' 'redis'
    offs=() ons=() roffs=() rons=()
    for ((r = 1; r <= REPS; r++)); do
        offs+=("${USX[enqoff.gw.$r]}")
        ons+=("${USX[enqon.gw.$r]}")
        roffs+=("${RUS[enqoff.gw.$r]}")
        rons+=("${RUS[enqon.gw.$r]}")
        printf '  %-4s %9s %6s %6s | %9s %6s %6s\n' "$r" "${RPS[enqoff.gw.$r]}" \
            "${USX[enqoff.gw.$r]}" "${RUS[enqoff.gw.$r]}" "${RPS[enqon.gw.$r]}" \
            "${USX[enqon.gw.$r]}" "${RUS[enqon.gw.$r]}"
    done
    printf '  median gateway us per join: browsers %s, customers %s (%s×); Redis: %s, %s\n\n' \
        "$(median "${offs[@]}")" "$(median "${ons[@]}")" \
        "$(ratio "$(median "${ons[@]}")" "$(median "${offs[@]}")")" \
        "$(median "${roffs[@]}")" "$(median "${rons[@]}")"
fi

R_STATUS=$(ratio "${MED[RPS.status.gw]}" "${MED[RPS.status.ng]}")
R_JOINS=$(ratio "${MED[RPS.joins.gw]}" "${MED[RPS.joins.ng]}")
R_TLS=$(ratio "${MED[RPS.tls.gw]}" "${MED[RPS.tls.ng]}")
printf 'targets (issue 3), on medians:\n'
printf '  status polls  %5s× nginx (≥ 0.80)  %s;  p99 %s ms (< 10)  %s\n' "$R_STATUS" \
    "$(verdict "$R_STATUS" '>=' 0.8)" "${MED[P99.status.gw]}" "$(verdict "${MED[P99.status.gw]}" '<' 10)"
printf '  joins         %5s× nginx (≥ 0.30)  %s\n' "$R_JOINS" "$(verdict "$R_JOINS" '>=' 0.3)"
printf '  new TLS conns %5s× nginx (≥ 0.80)  %s\n' "$R_TLS" "$(verdict "$R_TLS" '>=' 0.8)"
if ((COUNT)); then
    printf '\nper answered request (counting runs under strace; allocations: malloc+calloc+realloc)\n'
    printf '  %-7s %14s %14s | %14s %14s\n' '' 'gw syscalls' 'gw allocs' 'nginx syscalls' 'nginx allocs'
    for kind in status joins; do
        printf '  %-7s %14s %14s | %14s %14s\n' "$kind" "${SYS[$kind.gw]}" "${ALLOC[$kind.gw]}" \
            "${SYS[$kind.ng]}" "${ALLOC[$kind.ng]}"
    done
    for kind in status joins; do
        for side in gw ng; do
            printf '  %s %s: %s\n' "$kind" "$side" "${TOPSYS[$kind.$side]}"
        done
    done
fi
printf '\nmeasured in %d s; gateway log during the runs: %s warnings, %s errors\n' "$ELAPSED" "$LOG_WARN" "$LOG_ERR"
if [[ -s $OUT/anomalies ]]; then
    printf 'anomalies (answers other than the expected status, socket errors):\n'
    sed 's/^/  /' "$OUT/anomalies"
fi
