# deploy/lib/procs.sh — processes: pid files, starting, stopping, readiness.
# Sourced by deploy/onsale (the entry point: its header says what each command does), in
# the order it lists; not a program of its own.
# shellcheck shell=bash
# The parts share their variables (defined in one, used in others): checked one at a time
# they would look unused or unassigned.
# shellcheck disable=SC2034,SC2153

# ---------------------------------------------------------------------------------------
# processes: pid files in $RUN, identity checked against /proc so a stale pid file (or a
# recycled pid) never makes us report or signal a process that is not ours.

# proc_matches PID SUBSTRING: PID is alive (not a zombie) and its command line contains
# SUBSTRING.
proc_matches() {
    local pid=$1 match=$2 stat cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]] || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmd == *"$match"* ]]
}

pidfile_pid() { [[ -r $1 ]] && head -n 1 "$1" 2>/dev/null | tr -dc '0-9'; }

# svc_pid NAME: prints the pid of our running NAME, or fails. NAME is one of the started
# binaries (pid file $RUN/NAME.pid, command line recorded in $RUN/NAME.cmd), redis or
# postgres, or (cluster topology) one of pg_auto_failover's pg-monitor, pg-1, pg-2.
svc_pid() {
    local name=$1 pid match
    case $name in
    postgres)
        pid=$(pidfile_pid "$PGDATA/postmaster.pid") || return 1
        match="-D $PGDATA"
        ;;
    redis | redis-[0-9]*)
        pid=$(pidfile_pid "$RUN/$name.pid") || return 1
        match=redis-server
        ;;
    pg-monitor | pg-[0-9])
        pid=$(pidfile_pid "$RUN/$name.pid") || return 1
        match=$(pgha_match "$name")
        ;;
    *)
        pid=$(pidfile_pid "$RUN/$name.pid") || return 1
        match=$(cat "$RUN/$name.cmd" 2>/dev/null) || return 1
        ;;
    esac
    proc_matches "$pid" "$match" || return 1
    printf '%s' "$pid"
}
svc_running() { svc_pid "$1" >/dev/null; }

# stop_pid NAME PID: SIGTERM, wait up to $STOP_TIMEOUT s, then SIGKILL.
stop_pid() {
    local name=$1 pid=$2 match i
    match=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 0
    say "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        proc_matches "$pid" "$match" || return 0
        sleep 0.1
    done
    say "$name (pid $pid) did not stop in ${STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        proc_matches "$pid" "$match" || return 0
        sleep 0.1
    done
    die "$name (pid $pid) survived SIGKILL"
}

# start_service NAME PORT CMD…: runs CMD in the background (own session, stdin
# /dev/null, output appended to $LOG/NAME.log), pid in $RUN/NAME.pid. Does nothing when
# our NAME is already running.
start_service() {
    local name=$1 port=$2 pid
    shift 2
    if pid=$(svc_pid "$name"); then
        say "$name already running (pid $pid)"
        return 0
    fi
    ! port_in_use "$port" ||
        die "cannot start $name: 127.0.0.1:$port is already in use (set ONSALE_${name^^}_PORT)"
    mkdir -p "$RUN" "$LOG"
    printf '%s' "$*" >"$RUN/$name.cmd"
    printf '\n=== %s starting: %s\n' "$(date -u +%FT%TZ)" "$*" >>"$LOG/$name.log"
    # shellcheck disable=SC2004 # LOG_START is associative (common.sh): $name is a key
    LOG_START[$name]=$(stat -c %s "$LOG/$name.log")
    # The subshell is no process-group leader (no job control here), so setsid execs in
    # place: $! is the service itself, in a session of its own.
    # ONSALE_<SERVICE>_PORT are this script's port bases, already in the config it wrote;
    # the services would read them as their own `port` (the cluster topology's second
    # gateway and reserve listen elsewhere).
    (
        cd /
        close_fds
        unset ONSALE_GATEWAY_PORT ONSALE_RESERVE_PORT ONSALE_PAYSIM_PORT
        exec nohup setsid "$@"
    ) </dev/null >>"$LOG/$name.log" 2>&1 &
    pid=$!
    printf '%s\n' "$pid" >"$RUN/$name.pid"
    STARTED+=("$name")
    say "started $name (pid $pid, log $LOG/$name.log)"
}

# log_tail NAME: the last lines NAME logged since we started it (or of its whole log).
log_tail() {
    printf -- '--- %s (tail) ---\n' "$LOG/$1.log" >&2
    tail -c "+$((${LOG_START[$1]:-0} + 1))" "$LOG/$1.log" 2>/dev/null | tail -n 40 >&2 || true
    printf -- '---\n' >&2
}

# wait_ready NAME URL: waits (bounded) until URL answers 200 over TLS verified with our
# CA, while our NAME keeps running; else prints the tail of its log and fails.
wait_ready() {
    local name=$1 url=$2 code=000 deadline=$((SECONDS + READY_TIMEOUT))
    while :; do
        # twice, 0.1 s apart: while nohup/setsid exec the service its cmdline can read empty
        if ! svc_running "$name" && ! { sleep 0.1 && svc_running "$name"; }; then
            log_tail "$name"
            die "$name exited during start-up (log: $LOG/$name.log)"
        fi
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$CA" "$url" 2>/dev/null) ||
            true
        [[ $code == 200 ]] && return 0
        if ((SECONDS >= deadline)); then
            log_tail "$name"
            die "$name not ready after ${READY_TIMEOUT}s: $url answered '$code' (log: $LOG/$name.log)"
        fi
        sleep 0.2
    done
}
