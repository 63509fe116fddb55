# deploy/lib/control.sh — down, status, env, sim.
# Sourced by deploy/onsale (the entry point: its header says what each command does), in
# the order it lists; not a program of its own.
# shellcheck shell=bash
# The parts share their variables (defined in one, used in others): checked one at a time
# they would look unused or unassigned.
# shellcheck disable=SC2034,SC2153

# ---------------------------------------------------------------------------------------
# down / status / env

# Every service name either topology may have started, in stop order.
# pg_auto_failover's monitor goes before its nodes, so that stopping them fails nothing over.
ALL_SERVICES=(haproxy gateway gateway-1 gateway-2 reserve reserve-1 reserve-2 paysim redis
    redis-1 redis-2 redis-3 redis-4 redis-5 redis-6 pg-monitor pg-1 pg-2)

any_running() {
    local s
    for s in "${ALL_SERVICES[@]}" postgres; do svc_running "$s" && return 0; done
    return 1
}

# A failed `up` stops what it started itself (newest first), so the next `up` — perhaps
# with another state dir — does not meet a half stack holding its ports.
rollback_up() {
    local i s pid
    UP_RUNNING=0
    ((${#STARTED[@]} > 0)) || return 0
    say "up failed: stopping what it started (${STARTED[*]})"
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
        s=${STARTED[$i]}
        if [[ $s == postgres ]]; then
            as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 -s stop </dev/null >/dev/null 2>&1 ||
                { pid=$(svc_pid postgres) && stop_pid postgres "$pid"; } || true
            rm -f "$RUN/postgres.pid"
        elif pid=$(svc_pid "$s"); then
            stop_pid "$s" "$pid" || true
            rm -f "$RUN/$s.pid" "$RUN/$s.cmd"
        fi
    done
}

cmd_down() {
    [[ ! -d $STATE ]] || pg_home
    if [[ ! -d $STATE ]]; then
        say "nothing to stop: $STATE does not exist"
        return 0
    fi
    lock_state
    local s pid
    for s in "${ALL_SERVICES[@]}"; do
        if pid=$(svc_pid "$s"); then
            stop_pid "$s" "$pid"
        elif [[ -e $RUN/$s.pid ]]; then
            say "$s not running (removing stale pid file)"
        fi
        rm -f "$RUN/$s.pid" "$RUN/$s.cmd"
    done
    if pid=$(svc_pid postgres); then
        say "stopping postgres (pid $pid)"
        as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 -s stop </dev/null ||
            as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m immediate -w -t 30 -s stop </dev/null ||
            stop_pid postgres "$pid"
    fi
    rm -f "$RUN/postgres.pid"
    say "stopped everything started from $STATE"
}

cmd_status() {
    [[ ! -d $STATE ]] || pg_home
    local s pid addr services
    use_recorded_build
    if [[ $TOPOLOGY == cluster ]]; then
        services=(redis-1 redis-2 redis-3 redis-4 redis-5 redis-6 paysim reserve-1
            reserve-2 gateway-1 gateway-2 haproxy)
    else
        services=(redis postgres paysim reserve gateway)
    fi
    printf '%-9s %-8s %-8s %s\n' SERVICE STATE PID ADDRESS
    for s in "${services[@]}"; do
        case $s in
        redis) addr=127.0.0.1:${PORT[REDIS]} ;;
        redis-[0-9]) addr=127.0.0.1:$((PORT[REDIS] + ${s#redis-} - 1)) ;;
        postgres) addr=127.0.0.1:${PORT[PG]} ;;
        paysim) addr=$PAYSIM_URL ;;
        reserve) addr=$RESERVE_URL ;;
        gateway) addr=$GATEWAY_URL ;;
        reserve-[0-9]) addr=https://127.0.0.1:${RESERVE_PORTS[${s#reserve-} - 1]} ;;
        gateway-[0-9]) addr=https://127.0.0.1:${GATEWAY_PORTS[${s#gateway-} - 1]} ;;
        haproxy) addr="$GATEWAY_URL (gateways), $RESERVE_URL (reserves)" ;;
        esac
        if [[ $s == redis-[0-9] ]] && svc_running "$s"; then
            # the role each node has now (failovers promote replicas)
            addr+=" $(redis_cli_at "${addr##*:}" role 2>/dev/null | head -n 1)"
        fi
        if pid=$(svc_pid "$s"); then
            printf '%-9s %-8s %-8s %s\n' "$s" running "$pid" "$addr"
        elif [[ $s == gateway && ! -x $GATEWAY_BIN ]] || [[ $s == paysim && ! -x $PAYSIM_BIN ]]; then
            printf '%-9s %-8s %-8s %s\n' "$s" stopped - "(not built)"
        else
            printf '%-9s %-8s %-8s %s\n' "$s" stopped - "$addr"
        fi
    done
    if [[ $TOPOLOGY == cluster ]]; then pgha_status; fi
    if [[ $TOPOLOGY == cluster ]] && svc_running redis-1; then
        printf 'redis cluster: %s\n' "$(redis_cli_at "${PORT[REDIS]}" cluster info 2>/dev/null |
            grep -m1 '^cluster_state' | tr -d '\r')"
    fi
    printf 'topology: %s; state dir: %s\n' "$TOPOLOGY" "$STATE"
}

cmd_env() {
    [[ ! -d $STATE ]] || pg_home
    local n
    use_recorded_build
    printf 'export ONSALE_TOPOLOGY=%q\n' "$TOPOLOGY"
    printf 'export ONSALE_STATE=%q\n' "$STATE"
    printf 'export ONSALE_BUILD=%q\n' "$BUILD"
    for n in "${PORT_NAMES[@]}"; do printf 'export ONSALE_%s_PORT=%q\n' "$n" "${PORT[$n]}"; done
    printf 'export ONSALE_RESERVE_URL=%q\n' "$RESERVE_URL"
    printf 'export ONSALE_GATEWAY_URL=%q\n' "$GATEWAY_URL"
    printf 'export ONSALE_PAYSIM_URL=%q\n' "$PAYSIM_URL"
    printf 'export ONSALE_CA=%q\n' "$CA"
    printf 'export ONSALE_ADMIN_TOKEN_FILE=%q\n' "$ADMIN_TOKEN_FILE"
    printf 'export ONSALE_GATEWAY_ADMIN_TOKEN_FILE=%q\n' "$GATEWAY_ADMIN_TOKEN_FILE"
    printf 'export ONSALE_RESERVE_ADMIN_URL=%q\n' "$RESERVE_ADMIN_URL"
    printf 'export ONSALE_GATEWAY_ADMIN_URL=%q\n' "$GATEWAY_ADMIN_URL"
    printf 'export ONSALE_ADMISSION_KEY=%q\n' "$ADMISSION_KEY"
    printf 'export ONSALE_ADMISSION_PUB=%q\n' "$ADMISSION_PUB"
    printf 'export ONSALE_TICKET_SECRET_FILE=%q\n' "$KEYS/ticket-secret"
    printf 'export ONSALE_SALE_SITE_KEY=%q\n' "$SALE_SITE_KEY"
    printf 'export ONSALE_PG_CONNINFO=%q\n' "$PG_CONNINFO"
    if [[ $TOPOLOGY == cluster ]]; then
        printf 'export ONSALE_REDIS_CLUSTER=%q\n' "$REDIS_SEEDS"
        printf 'export ONSALE_GATEWAY_PORTS=%q\n' "${GATEWAY_PORTS[*]}"
        printf 'export ONSALE_RESERVE_PORTS=%q\n' "${RESERVE_PORTS[*]}"
        printf 'export ONSALE_HAPROXY_SOCKET=%q\n' "$RUN/haproxy.sock"
    fi
    printf 'export ONSALE_REDIS_USER=%q\n' "$REDIS_USER"
    printf 'export ONSALE_REDIS_TLS=%q\n' "$REDIS_TLS"
    printf 'export ONSALE_REDIS_PASSWORD_FILE=%q\n' "$REDIS_PASSWORD_FILE"
    printf 'export ONSALE_REDIS_GATEWAY_USER=%q\n' "$REDIS_GATEWAY_USER"
    printf 'export ONSALE_REDIS_GATEWAY_PASSWORD_FILE=%q\n' "$REDIS_GATEWAY_PASSWORD_FILE"
    printf 'export ONSALE_REDIS_RESERVE_USER=%q\n' "$REDIS_RESERVE_USER"
    printf 'export ONSALE_REDIS_RESERVE_PASSWORD_FILE=%q\n' "$REDIS_RESERVE_PASSWORD_FILE"
    printf 'export ONSALE_PG_USER=onsale\n'
    printf 'export ONSALE_PG_PASSWORD_FILE=%q\n' "$PG_PASSWORD_FILE"
}

# sim SCENARIO [onsale-sim options]: the on-sale simulator against the running stack,
# with everything `env` exports (loadgen/scenarios/README.md; report in sim-out/).
cmd_sim() {
    local sim=$BUILD/loadgen/sim/onsale-sim
    use_recorded_build
    sim=$BUILD/loadgen/sim/onsale-sim
    [[ -x $sim ]] || die "$sim not built (run '$PROG build')"
    [[ $# -ge 1 ]] || die "usage: $PROG sim <scenario.json> [onsale-sim options]"
    svc_running reserve || svc_running reserve-1 ||
        die "the stack in $STATE is not running (run '$PROG up')"
    eval "$(cmd_env)"
    # Its audit reads the Postgres password from ONSALE_PG_PASSWORD_FILE itself: no
    # PGPASSWORD here, or operator commands running deploy/onsale up would log in as
    # postgres with the onsale user's password.
    export ONSALE_CTL=$ROOT/deploy/onsale
    exec "$sim" "$@"
}
