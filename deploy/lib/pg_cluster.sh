# shellcheck shell=bash
# shellcheck disable=SC2153 # PORT, PGDATA, LOG, RUN …: deploy/onsale defines them
# deploy/lib/pg_cluster.sh — Postgres of the cluster topology, sourced by deploy/onsale:
# a primary and a synchronous standby under pg_auto_failover (docs/design.md, "Postgres
# with a standby"; docs/operations.md, "Postgres: primary, standby, monitor").
#
#   pg-monitor  the pg_auto_failover monitor (a Postgres of its own) on PG+20
#   pg-1, pg-2  the data nodes on PG and PG+10, each a `pg_autoctl run` keeper that
#               supervises its Postgres; whichever the monitor made primary takes writes
#
# Data under $PGHA_DIR (next to where the single topology keeps its data: pg_home), one
# directory per node, pg_autoctl's own files in $PGHA_DIR/xdg. Every process runs as user
# postgres (root required: pg_autoctl refuses root, and setpriv execs in place so the pid
# file holds the keeper itself). The keepers and the monitor run with short timeouts
# (pgha_tune) so that a lost primary is replaced within seconds, not the default minute.

PGHA_PACKAGES=(postgresql-15-auto-failover pg-auto-failover-cli)
PGHA_NODES=2
PGHA_SOCKDIR=/var/run/postgresql # pg_autoctl talks to its own Postgres on this socket

# pgha_port NAME: pg-1 on PG, pg-2 on PG+10, pg-monitor on PG+20.
pgha_port() {
    case $1 in
    pg-monitor) printf '%s' $((PORT[PG] + 20)) ;;
    pg-[0-9]) printf '%s' $((PORT[PG] + (${1#pg-} - 1) * 10)) ;;
    esac
}

# The reserves' and the tools' conninfo: both nodes, the first that takes writes.
pgha_conninfo() {
    local hosts='' ports='' i
    for ((i = 1; i <= PGHA_NODES; i++)); do
        hosts+=${hosts:+,}127.0.0.1
        ports+=${ports:+,}$(pgha_port "pg-$i")
    done
    printf 'host=%s port=%s dbname=onsale user=onsale target_session_attrs=read-write connect_timeout=2' \
        "$hosts" "$ports"
}

pgha_monitor_uri() {
    printf 'postgres://autoctl_node@127.0.0.1:%s/pg_auto_failover?sslmode=disable' "$(pgha_port pg-monitor)"
}

pgha_dir() { printf '%s/pgha' "$(dirname "$PGDATA")"; }

# pgha_match NAME: what the command line of NAME's keeper (or the monitor's) contains.
pgha_match() { printf 'pg_autoctl run --pgdata %s/%s' "$(pgha_dir)" "$1"; }

# pgha_cmd ARGS…: the command line that runs ARGS as postgres with pg_autoctl's
# environment (its config, state and pid files under $PGHA_DIR/xdg).
pgha_cmd() {
    local d
    d=$(pgha_dir)
    PGHA_CMD=(setpriv --reuid postgres --regid postgres --init-groups
        env "HOME=$d" "XDG_CONFIG_HOME=$d/xdg/config" "XDG_DATA_HOME=$d/xdg/data"
        "XDG_RUNTIME_DIR=$d/xdg/run" "PATH=$PG_BIN:/usr/bin:/bin" "PG_CONFIG=$PG_BIN/pg_config"
        "$@")
}

pgha_run() {
    pgha_cmd "$@"
    (cd / && close_fds && "${PGHA_CMD[@]}")
}

# psql as the postgres superuser on NAME's socket (peer authentication: no password).
pgha_psql() {
    local name=$1
    shift
    pgha_run psql -X -q -A -t -v ON_ERROR_STOP=1 -h "$PGHA_SOCKDIR" -p "$(pgha_port "$name")" \
        -d "${PGHA_DB:-postgres}" "$@"
}

# Our HBA rules on a data node (pg_autoctl's --skip-pg-hba: it adds none of its own):
# the superuser by peer on the socket (pg_autoctl, this script) or by password, the
# services by password; the monitor's health checks and the replication user from the
# loopback only, without a password (a dev stack: production gives them passwords or
# certificates, docs/operations.md).
pgha_write_hba() {
    cat >"$1/pg_hba.conf" <<'EOF'
# written by deploy/onsale (cluster topology): loopback only
local all         postgres                              peer
local all         all                                   scram-sha-256
host  all         pgautofailover_monitor    127.0.0.1/32 trust
host  replication pgautofailover_replicator 127.0.0.1/32 trust
host  all         pgautofailover_replicator 127.0.0.1/32 trust
host  all         all                       127.0.0.1/32 scram-sha-256
EOF
    chown postgres:postgres "$1/pg_hba.conf"
}

pgha_write_monitor_hba() {
    cat >"$1/pg_hba.conf" <<'EOF'
# written by deploy/onsale (cluster topology): the keepers register and report as
# autoctl_node, and the monitor's own listener does so on the socket; the superuser by
# peer only
local all              postgres                 peer
local pg_auto_failover autoctl_node              trust
host  pg_auto_failover autoctl_node 127.0.0.1/32 trust
EOF
    chown postgres:postgres "$1/pg_hba.conf"
}

# The monitor's failover timing: a node is unhealthy after 3 s without a report and a
# failed health check (1 s apart, 1 s timeout); the standby is promoted, and takes writes
# once the old primary has had 6 s to demote itself (primary_demote_timeout, above the
# keepers' network_partition_timeout of 3 s: a primary cut off from both the monitor and
# its standby demotes itself first — the fence).
pgha_tune_monitor() {
    local g
    for g in health_check_period=1000 health_check_timeout=1000 health_check_max_retries=1 \
        health_check_retry_delay=500 node_considered_unhealthy_timeout=3000 \
        primary_demote_timeout=6000; do
        printf 'ALTER SYSTEM SET pgautofailover.%s;\n' "$g"
    done | PGHA_DB=pg_auto_failover pgha_psql pg-monitor -f - >/dev/null ||
        die "tuning the pg_auto_failover monitor failed"
    PGHA_DB=pg_auto_failover pgha_psql pg-monitor -c 'SELECT pg_reload_conf()' >/dev/null ||
        die "reloading the monitor's settings failed"
}

pgha_tune_node() {
    pgha_run pg_autoctl config set --pgdata "$1" timeout.network_partition_timeout 3 >/dev/null ||
        die "pg_autoctl config set on $1 failed"
}

# pgha_create NAME: `pg_autoctl create` once (marker file): initdb (or, for a second
# node, a base backup of the primary), registration with the monitor.
pgha_create() {
    local name=$1 d data port monitor_uri
    d=$(pgha_dir)
    data=$d/$name
    port=$(pgha_port "$name")
    [[ -f $d/$name.created ]] && return 0
    rm -rf "$data"
    say "pg_autoctl create $name (127.0.0.1:$port)"
    if [[ $name == pg-monitor ]]; then
        pgha_run pg_autoctl create monitor --pgdata "$data" --pgport "$port" \
            --hostname 127.0.0.1 --listen 127.0.0.1 --auth trust --no-ssl \
            </dev/null >>"$LOG/$name.log" 2>&1 ||
            { tail -n 20 "$LOG/$name.log" >&2; die "pg_autoctl create monitor failed (log: $LOG/$name.log)"; }
        pgha_write_monitor_hba "$data"
    else
        monitor_uri=$(pgha_monitor_uri)
        pgha_run pg_autoctl create postgres --pgdata "$data" --pgport "$port" --name "$name" \
            --hostname 127.0.0.1 --listen 127.0.0.1 --dbname onsale --no-ssl \
            --skip-pg-hba --monitor "$monitor_uri" </dev/null >>"$LOG/$name.log" 2>&1 ||
            { tail -n 20 "$LOG/$name.log" >&2; die "pg_autoctl create postgres $name failed (log: $LOG/$name.log)"; }
        pgha_write_hba "$data"
        pgha_tune_node "$data"
    fi
    touch "$d/$name.created"
}

# pgha_start NAME: its keeper (or the monitor) as a service (pgha_launch); waits until
# its Postgres answers on its socket (pgha_wait).
pgha_start() {
    pgha_launch "$1"
    pgha_wait "$1"
}

pgha_launch() {
    local name=$1 d pid
    d=$(pgha_dir)
    if pid=$(svc_pid "$name"); then
        say "$name already running (pid $pid, 127.0.0.1:$(pgha_port "$name"))"
        return 0
    fi
    pgha_cmd pg_autoctl run --pgdata "$d/$name"
    start_service "$name" "$(pgha_port "$name")" "${PGHA_CMD[@]}"
}

pgha_wait() {
    local name=$1 i
    for ((i = 0; i < 300; i++)); do
        svc_running "$name" || { sleep 0.1 && svc_running "$name"; } ||
            { log_tail "$name"; die "$name exited during start-up (log: $LOG/$name.log)"; }
        pgha_psql "$name" -c 'SELECT 1' >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    log_tail "$name"
    die "$name: Postgres did not answer on 127.0.0.1:$(pgha_port "$name") in 30 s"
}

# The node that takes writes now (pg-1 or pg-2), or nothing.
pgha_primary() {
    local i
    for ((i = 1; i <= PGHA_NODES; i++)); do
        if [[ $(pgha_psql "pg-$i" -c 'SELECT pg_is_in_recovery()' 2>/dev/null) == f ]]; then
            printf 'pg-%s' "$i"
            return 0
        fi
    done
    return 1
}

# pgha_role NAME: primary (with its synchronous standbys) or standby, as Postgres says.
pgha_role() {
    local r
    r=$(pgha_psql "$1" -c "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary, sync standbys: ' || (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')) END" 2>/dev/null) ||
        r=unreachable
    printf '%s' "$r"
}

# Waits (bounded) for a primary with a synchronous standby streaming from it.
pgha_wait_sync() {
    local i p
    for ((i = 0; i < 600; i++)); do
        if p=$(pgha_primary) && [[ $(pgha_role "$p") == *'sync standbys: '[1-9]* ]]; then
            say "postgres: $p is primary, with a synchronous standby"
            return 0
        fi
        sleep 0.1
    done
    die "postgres: no primary with a synchronous standby after 60 s (logs: $LOG/pg-*.log)"
}

# The superuser's password (psql_admin and the tools log in over TCP with it) and the
# onsale database owned by the services' role (pg_autoctl created it for postgres), which
# may read the replication state.
pgha_ensure_db() {
    local p pw
    p=$(pgha_primary) || die "postgres: no primary"
    pw=$(cat "$PG_ADMIN_PASSWORD_FILE") || die "cannot read $PG_ADMIN_PASSWORD_FILE"
    printf "ALTER ROLE postgres PASSWORD '%s';\n" "$pw" | pgha_psql "$p" -f - >/dev/null ||
        die "setting the password of role postgres failed"
    ensure_db
    psql_admin -c 'ALTER DATABASE onsale OWNER TO onsale' >/dev/null ||
        die "ALTER DATABASE onsale OWNER failed"
    psql_admin -d onsale -c 'ALTER SCHEMA public OWNER TO onsale' >/dev/null ||
        die "ALTER SCHEMA public OWNER failed"
    # replication state (pg_stat_replication) for the tests, the tools and the metrics
    psql_admin -c 'GRANT pg_monitor TO onsale' >/dev/null || die "GRANT pg_monitor failed"
}

# The monitor, then the nodes (the second is a base backup of the first, so the first
# must run before the second is created), then a synchronous standby and the database;
# a stack made before starts its nodes first (below).
start_pg_cluster() {
    local d i
    is_root || die "the cluster topology runs Postgres as user postgres under pg_auto_failover: run as root"
    need setpriv
    [[ -x /usr/bin/pg_autoctl ]] ||
        die "pg_autoctl not found: apt-get install ${PGHA_PACKAGES[*]} (or '$PROG deps')"
    pg_home
    d=$(pgha_dir)
    mkdir -p "$d/xdg/config" "$d/xdg/data" "$d/xdg/run" "$LOG" "$RUN"
    chown -R postgres:postgres "$d"
    chmod 700 "$d"
    if [[ ! -d $PGHA_SOCKDIR ]]; then
        install -d -o postgres -g postgres -m 2775 "$PGHA_SOCKDIR"
    fi
    if [[ -f $d/pg-1.created && -f $d/pg-2.created ]]; then
        # A stack made before: the monitor (the keepers refuse to start without it), then
        # both keepers at once, so that it hears from both as soon as it can. It may still
        # find the primary's last report too old and fail over at start-up (no sale runs
        # then; docs/operations.md): the primary after an `up` is whichever it chose.
        pgha_start pg-monitor
        pgha_tune_monitor
        for ((i = 1; i <= PGHA_NODES; i++)); do pgha_launch "pg-$i"; done
        for ((i = 1; i <= PGHA_NODES; i++)); do pgha_wait "pg-$i"; done
    else
        pgha_create pg-monitor
        pgha_start pg-monitor
        pgha_tune_monitor
        for ((i = 1; i <= PGHA_NODES; i++)); do
            pgha_create "pg-$i"
            pgha_start "pg-$i"
        done
    fi
    pgha_wait_sync
    pgha_ensure_db
}

# Status lines: each node's role as its Postgres reports it, and the monitor's view.
pgha_status() {
    local s pid
    for s in pg-1 pg-2 pg-monitor; do
        if pid=$(svc_pid "$s"); then
            if [[ $s == pg-monitor ]]; then
                printf '%-9s %-8s %-8s %s\n' "$s" running "$pid" "127.0.0.1:$(pgha_port "$s") (pg_auto_failover)"
            else
                printf '%-9s %-8s %-8s %s\n' "$s" running "$pid" "127.0.0.1:$(pgha_port "$s") $(pgha_role "$s")"
            fi
        else
            printf '%-9s %-8s %-8s %s\n' "$s" stopped - "127.0.0.1:$(pgha_port "$s")"
        fi
    done
    if svc_running pg-monitor; then
        printf 'postgres (monitor view):\n'
        pgha_run pg_autoctl show state --monitor "$(pgha_monitor_uri)" 2>/dev/null | sed 's/^/  /' || true
    fi
}
