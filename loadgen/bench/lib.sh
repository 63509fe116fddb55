# shellcheck shell=bash
# loadgen/bench/lib.sh — what the benchmark scripts of loadgen/bench share, sourced by
# each (never run): messages, argument checks, the build, a private stack on free
# loopback ports in a temporary directory and its teardown, CPU time from /proc, wrk's
# RESULT line, medians, the gateway's admin API.
#
# The caller sets, before sourcing: ROOT (the checkout), PROG (its name in messages);
# before bench_workdir / bench_build / bench_up: BUILD, SKIP_BUILD, KEEP (0/1). It then
# uses STATE, OUT and WORK (bench_workdir), P_RESERVE P_REDIS P_PG P_GATEWAY P_PAYSIM
# (bench_pick_ports), STACK_UP. A script that needs more environment for deploy/onsale
# wraps bench_onsale: `onsale() { ONSALE_X=… bench_onsale "$@"; }`.

say() { printf '[%s %s] %s\n' "$PROG" "$(date +%T)" "$*" >&2; }
die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}

# bench_usage: the calling script's opening comment, from its second line to `set -euo`.
bench_usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

# bench_positive VAR…: each variable (by name) holds a positive integer, or exit 1.
bench_positive() {
    local v
    for v in "$@"; do
        [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { printf '%s: %s must be a positive integer\n' "$PROG" "$v" >&2; exit 1; }
    done
}

# bench_need HINT CMD…: each command is on PATH, or die naming it (and HINT, if any).
bench_need() {
    local hint=$1 c
    shift
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "'$c' not found${hint:+ ($hint)}"
    done
}

# bench_workdir PREFIX: a private temporary directory (WORK) holding the stack's state
# (STATE) and the outputs (OUT); the script runs inside it from here on.
bench_workdir() {
    WORK=$(mktemp -d "/tmp/$1.XXXXXX")
    chmod 755 "$WORK" # Postgres runs as user postgres when we are root: it must enter it
    STATE=$WORK/state
    OUT=$WORK/out
    mkdir -p "$OUT"
    cd "$WORK" || exit 1 # nothing below writes into the caller's directory
    STACK_UP=0
}

# bench_build: deploy/onsale build into BUILD, unless SKIP_BUILD.
bench_build() {
    if ((SKIP_BUILD)); then
        say "not building (--skip-build): using $BUILD"
        return
    fi
    say "building $BUILD (deploy/onsale build)"
    ONSALE_BUILD=$BUILD timeout 1800 "$ROOT/deploy/onsale" build >"$OUT/build.log" 2>&1 ||
        { tail -n 30 "$OUT/build.log" >&2; die "build failed (log above)"; }
}

# bench_pick_ports [PYTHON]: five distinct free loopback ports (bound together, so no
# two are equal) into P_RESERVE P_REDIS P_PG P_GATEWAY P_PAYSIM.
bench_pick_ports() {
    read -r P_RESERVE P_REDIS P_PG P_GATEWAY P_PAYSIM < <("${1:-python3}" -c '
import socket
ss = [socket.socket() for _ in range(5)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
}

# bench_onsale ARGS…: deploy/onsale on the private stack (bounded).
bench_onsale() {
    ONSALE_STATE=$STATE ONSALE_BUILD=$BUILD ONSALE_SKIP_DEPS=1 ONSALE_SKIP_BUILD=1 ONSALE_SEED=0 \
        ONSALE_RESERVE_PORT=$P_RESERVE ONSALE_REDIS_PORT=$P_REDIS ONSALE_PG_PORT=$P_PG \
        ONSALE_GATEWAY_PORT=$P_GATEWAY ONSALE_PAYSIM_PORT=$P_PAYSIM \
        timeout -k 10 240 "$ROOT/deploy/onsale" "$@"
}

# bench_up [PICK [ACCEPT]]: `onsale up` (the script's onsale function) on fresh ports,
# three tries when a port was taken meanwhile. PICK picks the ports (default
# bench_pick_ports); ACCEPT, when given, is asked after a failed `up` whether the stack
# is good enough anyway (0: go on with it).
bench_up() {
    local pick=${1:-bench_pick_ports} accept=${2:-} attempt
    for attempt in 1 2 3; do
        "$pick"
        say "starting the stack in $STATE (reserve :$P_RESERVE, gateway :$P_GATEWAY, redis :$P_REDIS, postgres :$P_PG)"
        STACK_UP=1
        if onsale up >>"$OUT/stack.log" 2>&1; then return; fi
        if [[ -n $accept ]] && "$accept"; then return; fi
        onsale down >>"$OUT/stack.log" 2>&1 || true
        STACK_UP=0
        grep -q 'already in use' "$OUT/stack.log" && ((attempt < 3)) && continue
        tail -n 30 "$OUT/stack.log" >&2
        die "deploy/onsale up failed"
    done
}

# bench_log_tail RC LOG WHAT: on a failed run (RC not 0), the end of a service's log.
bench_log_tail() {
    if (($1 != 0)) && [[ -s $2 ]]; then
        printf -- '--- tail of the %s log (%s) ---\n' "$3" "$2" >&2
        tail -n 20 "$2" >&2 || true
    fi
}

# bench_finish RC [WHAT-KEPT]: the end of the EXIT trap — the stack down, WORK removed
# (or kept with --keep, saying what it holds), exit RC.
bench_finish() {
    local rc=$1
    if ((STACK_UP)); then
        say "stopping the stack"
        onsale down >>"$OUT/stack.log" 2>&1 || say "warning: deploy/onsale down failed (see $OUT/stack.log)"
    fi
    if ((KEEP)); then
        say "kept $WORK${2:+ ($2)}"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}

# cpu_ticks PID…: user+system clock ticks the processes have used so far (/proc/PID/stat;
# a process that is gone counts 0).
cpu_ticks() {
    local p t=0 v
    for p in "$@"; do
        v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
        t=$((t + ${v:-0}))
    done
    echo "$t"
}
# cpu_pct TICKS_BEFORE TICKS_AFTER SECONDS: percent of one core.
cpu_pct() { awk -v a="$1" -v b="$2" -v s="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (s > 0 ? (b - a) / hz / s * 100 : 0) }'; }
# us_per TICKS_BEFORE TICKS_AFTER N: CPU microseconds per one of N.
us_per() { awk -v a="$1" -v b="$2" -v n="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (n > 0 ? (b - a) / hz * 1e6 / n : 0) }'; }

# field FILE KEY: KEY=value from the RESULT line of a wrk output.
field() { sed -n 's/^RESULT //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# median V…
median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        printf "%s", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

# bench_load: the load average (1, 5, 15 min), for the report of a shared machine.
bench_load() { cut -d' ' -f1-3 /proc/loadavg; }

# gw_admin METHOD PATH [JSON]: the gateway's admin API (token on curl's stdin config, so
# it never shows in ps). Prints the status; the body goes to $OUT/admin_body.
gw_admin() {
    printf 'header = "Authorization: Bearer %s"\n' "$(cat "$STATE/gateway-admin-token")" |
        curl -s -K - -o "$OUT/admin_body" -w '%{http_code}' --max-time 30 --cacert "$STATE/ca.pem" \
            -X "$1" -H 'Content-Type: application/json' ${3:+--data-binary "$3"} \
            "https://127.0.0.1:$((P_GATEWAY + 20))$2" || true # the gateway's admin listener
}
