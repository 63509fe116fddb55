# deploy/lib/redis.sh — Redis: one server, or the cluster topology's six nodes.
# Sourced by deploy/onsale (the entry point: its header says what each command does), in
# the order it lists; not a program of its own.
# shellcheck shell=bash
# The parts share their variables (defined in one, used in others): checked one at a time
# they would look unused or unassigned.
# shellcheck disable=SC2034,SC2153

# ---------------------------------------------------------------------------------------
# Redis

# redis-cli as the stack's admin ACL user (the password goes by environment, never argv).
# redis_cli_at PORT ARGS...
redis_cli_at() {
    local port=$1
    shift
    local -a tls
    redis_cli_tls tls
    REDISCLI_AUTH=$(cat "$REDIS_PASSWORD_FILE" 2>/dev/null) redis-cli --no-auth-warning \
        "${tls[@]}" -h 127.0.0.1 -p "$port" --user "$REDIS_USER" "$@"
}

# redis_cli_tls ARRAY: sets ARRAY to redis-cli's TLS options when Redis speaks TLS
# (none otherwise).
redis_cli_tls() {
    local -n opts=$1 # a nameref: the caller's array
    opts=()
    [[ $REDIS_TLS == 1 ]] || return 0
    # shellcheck disable=SC2034 # assigned through the nameref
    opts=(--tls --cacert "$CA" --cert "$STATE/server.pem" --key "$STATE/server-key.pem")
}

# redis.conf lines for TLS (ONSALE_REDIS_TLS=1): TLS only, on the given port.
# redis_tls_conf PORT [cluster]
redis_tls_conf() {
    if [[ $REDIS_TLS != 1 ]]; then
        printf 'port %s\n' "$1"
        return 0
    fi
    printf '# TLS only (ONSALE_REDIS_TLS=1): clients need a certificate from the dev CA\n'
    printf 'port 0\ntls-port %s\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n' \
        "$1" "$STATE/server.pem" "$STATE/server-key.pem" "$CA"
    printf 'tls-auth-clients yes\n'
    if [[ ${2:-} == cluster ]]; then
        printf 'tls-cluster yes\ntls-replication yes\n'
    fi
}

# SHA-256 of a password file's content, as an ACL line wants it (#<hex>).
pw_sha256() {
    openssl dgst -sha256 -r <"$1" | cut -d' ' -f1 || die "hashing $1 failed"
}

# The commands a service may run: reads, writes and scripts on the keys its patterns
# allow, never a dangerous or admin one (KEYS, FLUSHALL, CONFIG, DEBUG, ...), no
# functions, no SCRIPT FLUSH or KILL (the other service's scripts); TIME for the scripts'
# clock, CLUSTER SHARDS and ASKING for the cluster client (common/cm_redis_cluster.c).
REDIS_SERVICE_COMMANDS='-@all +@read +@write +@scripting +@connection -@dangerous -function -script|flush -script|kill +time +cluster|shards +asking'

# The ACL lines of every Redis of the stack (single or cluster node), passwords as their
# SHA-256 only (docs/operations.md, "Redis users"; the key schema: gateway/gw_rediskeys.c,
# reserve/rsv_rediskeys.h):
#   $REDIS_USER          everything: this script, tests, tools, replication, --cluster
#   $REDIS_GATEWAY_USER  its waiting rooms (os:{e}:q:*, os:gateway:*; q:* covers the
#                        phases' code holders q:cv and the presale codes' batches
#                        q:cbat, uses q:cu and revocations q:cr), the active set,
#                        and token records write-only, the stock feed read-only: never
#                        a hold, seat or pool key
#   $REDIS_RESERVE_USER  inventory and holds, the active set, the stock feed and its
#                        lock, token records read-only
# A key kind a service starts to use needs its pattern here. A script's declared keys
# need read and write access (Redis 7 checks EVAL's KEYS as read-write), so the hold
# scripts read tk: keys without declaring them. The default user stays: Redis 7.0
# replays the append-only file's MULTI/EXEC blocks (every script's writes) as the
# default user and refuses them (-NOPERM) when that user is off or restricted, so it
# keeps every permission with a password nobody has — the SHA-256 of random bytes drawn
# at each start and never written down.
redis_acl_conf() {
    local nobody admin gw rs k keys='' ev='os:{*}:'
    nobody=$(openssl rand 32 | openssl dgst -sha256 -r | cut -d' ' -f1) ||
        die "openssl rand failed"
    admin=$(pw_sha256 "$REDIS_PASSWORD_FILE") || exit 1
    gw=$(pw_sha256 "$REDIS_GATEWAY_PASSWORD_FILE") || exit 1
    rs=$(pw_sha256 "$REDIS_RESERVE_PASSWORD_FILE") || exit 1
    for k in seed s:\* h:\* b:\* p:\* pu:\* pn:\* pe:\* ik:\* rf:\* active dp:\* stock stockl; do
        keys+=" ~$ev$k"
    done
    keys+=" ~os:catalog:gen" # the catalogue generation (rsv_catalog.h)
    printf '# Authenticated only; the passwords are in %s, %s and %s.\n' \
        "$REDIS_PASSWORD_FILE" "$REDIS_GATEWAY_PASSWORD_FILE" "$REDIS_RESERVE_PASSWORD_FILE"
    printf 'user default on #%s ~* &* +@all\n' "$nobody"
    printf 'user %s on #%s ~* &* +@all\n' "$REDIS_USER" "$admin"
    printf 'user %s on #%s resetchannels ~%sq:* ~%sdp:* ~%sactive ~os:gateway:* %%W~%stk:* %%R~%sstock %s\n' \
        "$REDIS_GATEWAY_USER" "$gw" "$ev" "$ev" "$ev" "$ev" "$ev" "$REDIS_SERVICE_COMMANDS"
    printf 'user %s on #%s resetchannels%s %%R~%stk:* %s\n' \
        "$REDIS_RESERVE_USER" "$rs" "$keys" "$ev" "$REDIS_SERVICE_COMMANDS"
}

# A Redis started before the services had users of their own (redis_acl_conf) would
# refuse them: say so instead of services that never get ready.
# check_redis_users PORT NAME
check_redis_users() {
    [[ -n $(redis_cli_at "$1" acl getuser "$REDIS_RESERVE_USER" 2>/dev/null) ]] ||
        die "$2 on 127.0.0.1:$1 has no ACL user $REDIS_RESERVE_USER (it predates the per-service users): run '$PROG down' and '$PROG up'"
}

start_redis() {
    local pid port=${PORT[REDIS]} i
    if pid=$(svc_pid redis); then
        say "redis already running (pid $pid, 127.0.0.1:$port)"
        check_redis_users "$port" redis
        return 0
    fi
    need redis-server redis-cli
    ! port_in_use "$port" || die "cannot start redis: 127.0.0.1:$port is already in use (set ONSALE_REDIS_PORT)"
    mkdir -p "$STATE/redis"
    rm -f "$RUN/redis.pid"
    (umask 077 && : >"$STATE/redis.conf")
    cat >"$STATE/redis.conf" <<EOF
# written by deploy/onsale up; regenerated on every start
bind 127.0.0.1
$(redis_tls_conf "$port")
protected-mode yes
daemonize yes
pidfile $RUN/redis.pid
logfile $LOG/redis.log
dir $STATE/redis
appendonly yes
appendfsync everysec
# The append-only file is the durability; no RDB snapshots forking under load.
save ""
$(redis_acl_conf)
EOF
    (
        cd /
        close_fds
        exec redis-server "$STATE/redis.conf"
    ) </dev/null >>"$LOG/redis.log" 2>&1 ||
        { tail -n 20 "$LOG/redis.log" >&2; die "redis-server failed to start"; }
    for ((i = 0; i < 100; i++)); do
        if svc_running redis &&
            [[ $(redis_cli_at "$port" ping 2>/dev/null) == PONG ]]; then
            STARTED+=(redis)
            say "started redis (pid $(svc_pid redis), 127.0.0.1:$port, log $LOG/redis.log)"
            return 0
        fi
        sleep 0.1
    done
    tail -n 20 "$LOG/redis.log" >&2 || true
    die "redis did not come up on 127.0.0.1:$port (log: $LOG/redis.log)"
}

# start_redis_node I: cluster node I (1..6) on REDIS+I-1, bus REDIS+10+I-1, data in
# $STATE/redis-I (its nodes.conf keeps the cluster's membership across restarts).
start_redis_node() {
    local name=redis-$1 pid port=$((PORT[REDIS] + $1 - 1)) bus=$((PORT[REDIS] + 9 + $1)) n
    if pid=$(svc_pid "$name"); then
        say "$name already running (pid $pid, 127.0.0.1:$port)"
        check_redis_users "$port" "$name"
        return 0
    fi
    ! port_in_use "$port" || die "cannot start $name: 127.0.0.1:$port is already in use (set ONSALE_REDIS_PORT)"
    ! port_in_use "$bus" || die "cannot start $name: its cluster bus port 127.0.0.1:$bus is already in use"
    mkdir -p "$STATE/$name"
    rm -f "$RUN/$name.pid"
    (umask 077 && : >"$STATE/$name.conf") # masterauth below is the password itself
    cat >"$STATE/$name.conf" <<EOF
# written by deploy/onsale up (cluster topology); regenerated on every start
bind 127.0.0.1
$(redis_tls_conf "$port" cluster)
protected-mode yes
daemonize yes
pidfile $RUN/$name.pid
logfile $LOG/$name.log
dir $STATE/$name
appendonly yes
appendfsync everysec
save ""
cluster-enabled yes
cluster-config-file nodes.conf
cluster-port $bus
# A master silent this long is failed over to its replica (the failover time).
cluster-node-timeout 2000
$(redis_acl_conf)
# a replica authenticates to its master as the same user
masteruser $REDIS_USER
masterauth $(cat "$REDIS_PASSWORD_FILE")
EOF
    (
        cd /
        close_fds
        exec redis-server "$STATE/$name.conf"
    ) </dev/null >>"$LOG/$name.log" 2>&1 ||
        { tail -n 20 "$LOG/$name.log" >&2; die "redis-server ($name) failed to start"; }
    for ((n = 0; n < 100; n++)); do
        if svc_running "$name" &&
            [[ $(redis_cli_at "$port" ping 2>/dev/null) == PONG ]]; then
            STARTED+=("$name")
            say "started $name (pid $(svc_pid "$name"), 127.0.0.1:$port, log $LOG/$name.log)"
            return 0
        fi
        sleep 0.1
    done
    tail -n 20 "$LOG/$name.log" >&2 || true
    die "$name did not come up on 127.0.0.1:$port (log: $LOG/$name.log)"
}

cluster_ok() {
    local i
    for ((i = 0; i < CLUSTER_NODES; i++)); do
        redis_cli_at $((PORT[REDIS] + i)) cluster info 2>/dev/null |
            grep -q '^cluster_state:ok' || return 1
    done
}

# Six nodes; on first start `redis-cli --cluster create` makes three masters with one
# replica each. Afterwards the nodes remember the cluster by themselves.
start_redis_cluster() {
    local i addrs=() n
    need redis-server redis-cli
    for ((i = 1; i <= CLUSTER_NODES; i++)); do start_redis_node "$i"; done
    if [[ ! -f $STATE/redis-cluster.created ]]; then
        for ((i = 0; i < CLUSTER_NODES; i++)); do addrs+=("127.0.0.1:$((PORT[REDIS] + i))"); done
        say "creating the Redis Cluster (3 masters, 3 replicas): ${addrs[*]}"
        local -a tls
        redis_cli_tls tls
        REDISCLI_AUTH=$(cat "$REDIS_PASSWORD_FILE") redis-cli --no-auth-warning "${tls[@]}" \
            --user "$REDIS_USER" --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
            </dev/null >>"$LOG/redis-cluster.log" 2>&1 ||
            { tail -n 20 "$LOG/redis-cluster.log" >&2; die "redis-cli --cluster create failed (log: $LOG/redis-cluster.log)"; }
        touch "$STATE/redis-cluster.created"
    fi
    for ((n = 0; n < 300; n++)); do
        if cluster_ok; then
            say "Redis Cluster ok ($REDIS_SEEDS)"
            return 0
        fi
        sleep 0.1
    done
    die "the Redis Cluster did not reach cluster_state:ok in 30 s (logs: $LOG/redis-*.log)"
}
