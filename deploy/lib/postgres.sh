# deploy/lib/postgres.sh — Postgres: a private cluster, or the cluster topology's pg_auto_failover nodes.
# Sourced by deploy/onsale (the entry point: its header says what each command does), in
# the order it lists; not a program of its own.
# shellcheck shell=bash
# The parts share their variables (defined in one, used in others): checked one at a time
# they would look unused or unassigned.
# shellcheck disable=SC2034,SC2153

# ---------------------------------------------------------------------------------------
# Postgres: a private cluster in $STATE/pg, owned by `postgres` when we are root.

as_pg() {
    if is_root; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

pg_chown() { if is_root; then chown -R postgres:postgres "$@"; fi; }

# pg_home: where Postgres' data, log and socket live. In the state dir — unless we are
# root and user postgres cannot reach it (a checkout under /root, 0700): then under
# /var/lib/onsale/pg-<hash of the state dir>, owned by postgres, found again by every
# later command. Called once the state dir exists.
pg_home() {
    local alt
    [[ -d $STATE/pg ]] && return 0
    alt=/var/lib/onsale/pg-$(printf '%s' "$STATE" | sha256sum | cut -c1-16)
    if [[ -d $alt/data ]] || { is_root && id -u postgres >/dev/null 2>&1 &&
        ! (cd / && runuser -u postgres -- test -x "$STATE/") 2>/dev/null; }; then
        PGDATA=$alt/data
        PG_LOG=$alt/postgres.log
        PG_SOCKDIR=$alt/sock
        if [[ ! -d $alt ]]; then
            say "user postgres cannot reach $STATE: its data goes to $alt"
            mkdir -p "$alt"
            chown postgres:postgres "$alt"
            chmod 700 "$alt"
        fi
    fi
}

init_pg() {
    local done_marker=$PGDATA/.onsale-initdb-done
    [[ -f $done_marker ]] && return 0
    [[ -x $PG_BIN/initdb ]] || die "$PG_BIN/initdb not found; run '$PROG deps' first"
    if [[ -e $PGDATA ]]; then
        say "removing half-initialised $PGDATA"
        rm -rf "$PGDATA"
    fi
    mkdir -p "$PGDATA"
    chmod 700 "$PGDATA"
    pg_chown "$PGDATA"
    as_pg test -w "$PGDATA" ||
        die "Postgres runs as user postgres, which cannot write $PGDATA: make every parent directory of $STATE searchable (chmod o+x) or choose another ONSALE_STATE"
    say "initdb $PGDATA"
    # initdb reads the superuser's password from a file the postgres user can read (next
    # to the data directory: in the state dir, or where pg_home moved it)
    local pwfile
    pwfile=$(dirname "$PGDATA")/.pg-pwfile
    install -m 600 "$PG_ADMIN_PASSWORD_FILE" "$pwfile"
    pg_chown "$pwfile"
    as_pg "$PG_BIN/initdb" -D "$PGDATA" -U postgres --auth=scram-sha-256 \
        --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 >"$LOG/initdb.log" 2>&1 ||
        { rm -f "$pwfile"; tail -n 20 "$LOG/initdb.log" >&2; die "initdb failed (log: $LOG/initdb.log)"; }
    rm -f "$pwfile"
    write_pg_hba
    printf "\n# deploy/onsale: listen address, port and socket dir\ninclude_if_exists = 'onsale.conf'\n" \
        >>"$PGDATA/postgresql.conf"
    pg_chown "$PGDATA"
    touch "$done_marker"
}

# Every connection authenticates with scram-sha-256, on the socket and on 127.0.0.1.
write_pg_hba() {
    cat >"$PGDATA/pg_hba.conf" <<'EOF'
# written by deploy/onsale: a private development cluster on loopback, passwords only
local all all              scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
EOF
    pg_chown "$PGDATA/pg_hba.conf"
}

# A cluster made before passwords (pg_hba "trust"): give the superuser its password
# while trust still lets us in, then switch to scram-sha-256 and reload.
upgrade_pg_auth() {
    grep -q '^[^#]*trust' "$PGDATA/pg_hba.conf" || return 0
    say "postgres: switching $PGDATA from trust to scram-sha-256"
    PGPASSWORD='' set_pg_password postgres "$PG_ADMIN_PASSWORD_FILE"
    write_pg_hba
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -s reload >/dev/null || die "pg_ctl reload failed"
}

# set_pg_password ROLE FILE: ALTER ROLE … PASSWORD from FILE, sent on stdin (never argv).
set_pg_password() {
    local pw
    pw=$(cat "$2") || die "cannot read $2"
    [[ $pw =~ ^[0-9a-f]+$ ]] || die "$2 must hold hex digits (as deploy/onsale writes it)"
    printf "ALTER ROLE %s PASSWORD '%s';\n" "$1" "$pw" | psql_admin -f - >/dev/null ||
        die "setting the password of role $1 failed"
}

start_pg() {
    pg_home
    local pid port=${PORT[PG]} sockdir=$PG_SOCKDIR
    init_pg
    if pid=$(svc_pid postgres); then
        say "postgres already running (pid $pid, 127.0.0.1:$port)"
    else
        ! port_in_use "$port" ||
            die "cannot start postgres: 127.0.0.1:$port is already in use (set ONSALE_PG_PORT)"
        mkdir -p "$sockdir"
        pg_chown "$sockdir"
        # sun_path holds 107 bytes: with a long state dir, listen on TCP only.
        local sockets=$sockdir
        if ((${#sockdir} + 20 > 107)); then
            say "state dir path too long for a unix socket; postgres listens on TCP only"
            sockets=
        fi
        cat >"$PGDATA/onsale.conf" <<EOF
# written by deploy/onsale up; regenerated on every start
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sockets'
EOF
        touch "$PG_LOG"
        pg_chown "$PGDATA/onsale.conf" "$PG_LOG"
        # shellcheck disable=SC2094 # pg_ctl -l appends to the log, as we do
        (
            close_fds
            as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$PG_LOG" -w -t 60 -s start
        ) </dev/null >/dev/null 2>>"$PG_LOG" ||
            { tail -n 20 "$PG_LOG" >&2; die "postgres failed to start (log: $PG_LOG)"; }
        pid=$(svc_pid postgres) || die "postgres started but its pid is not in $PGDATA/postmaster.pid"
        printf '%s\n' "$pid" >"$RUN/postgres.pid"
        STARTED+=(postgres)
        say "started postgres (pid $pid, 127.0.0.1:$port, log $PG_LOG)"
    fi
    upgrade_pg_auth
    ensure_db
}

# The cluster topology: whichever node takes writes (PG_ADMIN_HOSTS/PORTS list both).
psql_admin() {
    PGPASSWORD=${PGPASSWORD-$(cat "$PG_ADMIN_PASSWORD_FILE")} PGCONNECT_TIMEOUT=5 \
        PGTARGETSESSIONATTRS=read-write psql -X -q -A -t -v ON_ERROR_STOP=1 \
        -h "$PG_ADMIN_HOSTS" -p "$PG_ADMIN_PORTS" -U postgres -d postgres "$@"
}

ensure_db() {
    need psql
    local out
    out=$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = 'onsale'") ||
        die "cannot connect to postgres on 127.0.0.1:${PORT[PG]}"
    if [[ $out != 1 ]]; then
        say "creating role onsale"
        psql_admin -c "CREATE ROLE onsale LOGIN CREATEDB" >/dev/null || die "CREATE ROLE failed"
    fi
    set_pg_password onsale "$PG_PASSWORD_FILE" # every up: the file is the truth
    out=$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = 'onsale'") || die "psql failed"
    if [[ $out != 1 ]]; then
        say "creating database onsale"
        psql_admin -c "CREATE DATABASE onsale OWNER onsale" >/dev/null || die "CREATE DATABASE failed"
    fi
}

# The cluster topology's Postgres: primary + synchronous standby under pg_auto_failover.
# shellcheck source=deploy/lib/pg_cluster.sh
. "$ROOT/deploy/lib/pg_cluster.sh"
PG_ADMIN_HOSTS=127.0.0.1
PG_ADMIN_PORTS=${PORT[PG]}
if [[ $TOPOLOGY == cluster ]]; then
    PG_CONNINFO=$(pgha_conninfo)
    PG_ADMIN_HOSTS=127.0.0.1,127.0.0.1
    PG_ADMIN_PORTS=$(pgha_port pg-1),$(pgha_port pg-2)
fi
