# deploy/lib/common.sh — messages, paths and ports: what every part uses.
# Sourced by deploy/onsale (the entry point: its header says what each command does), in
# the order it lists; not a program of its own.
# shellcheck shell=bash
# The parts share their variables (defined in one, used in others): checked one at a time
# they would look unused or unassigned.
# shellcheck disable=SC2034,SC2153

# ---------------------------------------------------------------------------------------
# messages

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}
need() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "'$c' not found; run '$PROG deps' first"
    done
}
is_root() { [[ $(id -u) -eq 0 ]]; }

# ---------------------------------------------------------------------------------------
# paths and ports

abspath() {
    local p=$1
    [[ $p == /* ]] || p=$PWD/$p
    while [[ $p == */ && $p != / ]]; do p=${p%/}; done
    printf '%s' "$p"
}

if [[ ${ONSALE_SANITIZE:-0} == 1 ]]; then
    BUILD=$(abspath "${ONSALE_BUILD:-$ROOT/build-asan}")
elif [[ ${ONSALE_SANITIZE:-0} == thread ]]; then
    BUILD=$(abspath "${ONSALE_BUILD:-$ROOT/build-tsan}")
else
    BUILD=$(abspath "${ONSALE_BUILD:-$ROOT/build}")
fi
STATE=$(abspath "${ONSALE_STATE:-$ROOT/.onsale}")
# Paths go unquoted into redis.conf, postgresql.conf, libpq conninfo and our own configs.
[[ $STATE =~ ^[A-Za-z0-9._/@+=,-]+$ ]] ||
    die "ONSALE_STATE '$STATE' may only contain letters, digits and . _ / @ + = , -"
RUN=$STATE/run
LOG=$STATE/log
KEYS=$STATE/keys
PGDATA=$STATE/pg
PG_LOG=$LOG/postgres.log
PG_SOCKDIR=$RUN/pgsock
STACK_FILE=$STATE/stack.env
CA=$STATE/ca.pem
ADMIN_TOKEN_FILE=$STATE/admin-token                 # the reserve's operators
GATEWAY_ADMIN_TOKEN_FILE=$STATE/gateway-admin-token # the gateway's (a token per service)
PAY_WEBHOOK_SECRET_FILE=$STATE/pay-webhook-secret   # paysim signs its webhooks, the reserve verifies
ADMIN_OFFSET=20 # each service's admin listener: its port + 20 (loopback only)
# Redis: an ACL user per service with only the keys and commands it needs
# (onsale-gateway, onsale-reserve: redis_acl_conf) and the admin user onsale (every
# permission) for this script, the tests, the tools and replication; the default user
# cannot log in. Postgres: scram-sha-256, role onsale for the services and tests, the
# postgres superuser for this script only.
REDIS_USER=onsale
REDIS_PASSWORD_FILE=$STATE/redis-password
REDIS_GATEWAY_USER=onsale-gateway
REDIS_GATEWAY_PASSWORD_FILE=$STATE/redis-gateway-password
REDIS_RESERVE_USER=onsale-reserve
REDIS_RESERVE_PASSWORD_FILE=$STATE/redis-reserve-password
PG_PASSWORD_FILE=$STATE/pg-password
PG_ADMIN_PASSWORD_FILE=$STATE/pg-admin-password
ADMISSION_KEY=$KEYS/admission-1.pem
ADMISSION_PUB=$KEYS/admission-pub.pem
# A stand-in for the sale site's enqueue-token key (docs/api.md, "Enqueue tokens"): the
# gateways trust its public half, docs/examples/enqueue.py signs with it.
SALE_SITE_KEY=$KEYS/sale-site-key.pem
SALE_SITE_PUB=$KEYS/sale-site-pub.pem

PORT_NAMES=(GATEWAY RESERVE REDIS PG PAYSIM HAPROXY)
declare -A PORT_DEFAULT=([GATEWAY]=8443 [RESERVE]=8444 [REDIS]=6391 [PG]=5441 [PAYSIM]=8445 [HAPROXY]=8080)
declare -A PORT_RECORDED=()
BUILD_RECORDED=
TOPOLOGY_RECORDED=
declare -A PORT=()
declare -A LOG_START=() # log size when we started a service: its start-up output follows

# Ports: $ONSALE_<NAME>_PORT, else what `up` recorded for this state dir (stack.env), else
# the default. Recording them lets `status`/`env`/`down` on a state dir started with
# custom ports work without repeating the variables.
load_ports() {
    local line val n var
    if [[ -r $STACK_FILE ]]; then
        while IFS= read -r line; do
            if [[ $line =~ ^ONSALE_([A-Z]+)_PORT=([0-9]+)$ ]]; then
                PORT_RECORDED[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
            elif [[ $line =~ ^ONSALE_BUILD=(/.*)$ ]]; then
                BUILD_RECORDED=${BASH_REMATCH[1]}
            elif [[ $line =~ ^ONSALE_TOPOLOGY=([a-z]+)$ ]]; then
                TOPOLOGY_RECORDED=${BASH_REMATCH[1]}
            elif [[ $line =~ ^ONSALE_REDIS_TLS=([01])$ ]]; then
                REDIS_TLS_RECORDED=${BASH_REMATCH[1]}
            fi
        done <"$STACK_FILE"
    fi
    for n in "${PORT_NAMES[@]}"; do
        var=ONSALE_${n}_PORT
        val=${!var:-${PORT_RECORDED[$n]:-${PORT_DEFAULT[$n]}}}
        if ! [[ $val =~ ^[0-9]+$ ]] || ((val < 1 || val > 65535)); then
            die "$var='$val' is not a TCP port"
        fi
        PORT[$n]=$val
    done
}
load_ports

# The topology: $ONSALE_TOPOLOGY, else what `up` recorded, else single.
TOPOLOGY=${ONSALE_TOPOLOGY:-${TOPOLOGY_RECORDED:-single}}
# ONSALE_REDIS_TLS=1: Redis speaks TLS only (port 0, tls-port on the Redis port; cluster
# bus and replication too), with the stack's server certificate, and requires a client
# certificate signed by the dev CA: services and redis-cli present the same certificate
# (its extendedKeyUsage has clientAuth). down/status/env read it back like the topology.
REDIS_TLS=${ONSALE_REDIS_TLS:-${REDIS_TLS_RECORDED:-0}}
[[ $REDIS_TLS == [01] ]] || die "ONSALE_REDIS_TLS='$REDIS_TLS': expected 0 or 1"
[[ $TOPOLOGY == single || $TOPOLOGY == cluster ]] ||
    die "ONSALE_TOPOLOGY='$TOPOLOGY': expected single or cluster"

# Cluster topology ports, all derived from the ONSALE_*_PORT bases: Redis nodes REDIS+0..5
# (cluster bus REDIS+10..15), gateways GATEWAY and GATEWAY+10, reserves RESERVE and
# RESERVE+10, HAProxy HAPROXY (gateways) and HAPROXY+1 (reserves).
CLUSTER_NODES=6
REDIS_SEEDS=
GATEWAY_PORTS=("${PORT[GATEWAY]}")
RESERVE_PORTS=("${PORT[RESERVE]}")
if [[ $TOPOLOGY == cluster ]]; then
    for ((i = 0; i < CLUSTER_NODES; i++)); do
        REDIS_SEEDS+=${REDIS_SEEDS:+,}127.0.0.1:$((PORT[REDIS] + i))
    done
    GATEWAY_PORTS=("${PORT[GATEWAY]}" "$((PORT[GATEWAY] + 10))")
    RESERVE_PORTS=("${PORT[RESERVE]}" "$((PORT[RESERVE] + 10))")
    for p in $((PORT[REDIS] + 15)) $((PORT[GATEWAY] + 10 + ADMIN_OFFSET)) $((PORT[RESERVE] + 10 + ADMIN_OFFSET)) $((PORT[HAPROXY] + 1)); do
        ((p <= 65535)) || die "cluster topology: port $p (derived from the ONSALE_*_PORT bases) is past 65535"
    done
    RESERVE_URL=https://127.0.0.1:$((PORT[HAPROXY] + 1))
    GATEWAY_URL=https://127.0.0.1:${PORT[HAPROXY]}
else
    RESERVE_URL=https://127.0.0.1:${PORT[RESERVE]}
    GATEWAY_URL=https://127.0.0.1:${PORT[GATEWAY]}
fi
# Admin API, dashboard and /metrics: the (first) instance's admin listener, never HAProxy.
RESERVE_ADMIN_URL=https://127.0.0.1:$((PORT[RESERVE] + ADMIN_OFFSET))
GATEWAY_ADMIN_URL=https://127.0.0.1:$((PORT[GATEWAY] + ADMIN_OFFSET))
PAYSIM_URL=https://127.0.0.1:${PORT[PAYSIM]}
PG_CONNINFO="host=127.0.0.1 port=${PORT[PG]} dbname=onsale user=onsale"

set_bins() {
    RESERVE_BIN=$BUILD/reserve/onsale-reserve
    GATEWAY_BIN=$BUILD/gateway/onsale-gateway
    PAYSIM_BIN=$BUILD/loadgen/paysim/onsale-paysim
    TOKEN_BIN=$BUILD/loadgen/onsale-token
}
set_bins
# status/env describe the stack as started: the build it runs from, unless ONSALE_BUILD
# names another.
use_recorded_build() {
    if [[ -z ${ONSALE_BUILD:-} && -n $BUILD_RECORDED ]]; then
        BUILD=$BUILD_RECORDED
        set_bins
    fi
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# close_fds: closes every descriptor above 2 in the current (sub)shell. Long-lived
# children are started through it so they keep neither our lock (fd 9) nor a pipe some
# caller leaked to us (a test harness waiting for EOF on it would hang).
close_fds() {
    local f fd
    for f in "/proc/$BASHPID/fd/"*; do
        fd=${f##*/}
        if [[ $fd =~ ^[0-9]+$ ]] && ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
}

# One `up`/`down` at a time per state dir; fd 9 holds the lock (see close_fds).
lock_state() {
    mkdir -p "$STATE"
    exec 9>>"$STATE/.lock"
    flock -w 300 9 || die "another $PROG is busy with $STATE (lock $STATE/.lock)"
}

TMP=
STARTED=()   # services this invocation started, in order
UP_RUNNING=0 # 1 while `up` is between its lock and its end
cleanup() {
    local rc=$?
    if ((UP_RUNNING && rc != 0)); then rollback_up; fi
    [[ -z $TMP ]] || rm -rf "$TMP"
}
trap cleanup EXIT
tmpdir() {
    if [[ -z $TMP ]]; then
        TMP=$(mktemp -d "$STATE/.tmp.XXXXXX")
    fi
}
