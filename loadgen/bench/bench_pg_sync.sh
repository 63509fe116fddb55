#!/usr/bin/env bash
# loadgen/bench/bench_pg_sync.sh — what synchronous replication costs one confirmation.
#
# On a running cluster-topology stack (ONSALE_TOPOLOGY=cluster deploy/onsale up: a primary
# and a synchronous standby under pg_auto_failover), pgbench replays the saga's own SQL
# for one confirmation (reserve/pg_saga.sql: its three commits, as bench_reserve.sh
# replays it) against the primary, REPS times each way, alternating:
#
#   sync    the stack's setting: synchronous_commit = on with the standby named in
#           synchronous_standby_names — every commit waits for the standby's flush
#   local   the same sessions with synchronous_commit = local (PGOPTIONS): the commit
#           waits for the primary's own flush only, as a single node would
#
# and prints confirmations per second and the mean latency of one confirmation each way,
# their medians, and the difference per confirmation (ms) — the cost docs/sizing.md
# quotes. Only the connections of this run change the setting; the reserves keep theirs.
#
# Usage: loadgen/bench/bench_pg_sync.sh [--reps N] [--clients C] [--per N]
# Environment: ONSALE_STATE (the stack's state dir, default <checkout>/.onsale).
# Needs: pgbench, psql. Exit status: 0 measured, 1 it could not run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
LIB=$ROOT/loadgen/bench/reserve
PROG=bench_pg_sync
# shellcheck source=loadgen/bench/lib.sh
. "$ROOT/loadgen/bench/lib.sh"
REPS=3
CLIENTS=8
PER=150 # confirmations per client and run

while (($#)); do
    case $1 in
    --reps) REPS=$2 && shift 2 ;;
    --clients) CLIENTS=$2 && shift 2 ;;
    --per) PER=$2 && shift 2 ;;
    -h | --help) bench_usage; exit 0 ;;
    *) die "unknown option $1 (usage: $PROG [--reps N] [--clients C] [--per N])" ;;
    esac
done
bench_positive REPS CLIENTS PER
bench_need '' pgbench psql awk

eval "$("$ROOT/deploy/onsale" env)"
[[ $ONSALE_TOPOLOGY == cluster ]] || die "needs the cluster topology (ONSALE_TOPOLOGY=cluster deploy/onsale up)"
PGPASSWORD=$(cat "$ONSALE_PG_PASSWORD_FILE") || die "cannot read $ONSALE_PG_PASSWORD_FILE"
export PGPASSWORD PGCONNECT_TIMEOUT=5 PGTARGETSESSIONATTRS=read-write
HOSTS=127.0.0.1,127.0.0.1
PORTS=$ONSALE_PG_PORT,$((ONSALE_PG_PORT + 10))
PSQL=(psql -X -q -A -t -v ON_ERROR_STOP=1 -h "$HOSTS" -p "$PORTS" -U onsale -d onsale)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

sync=$("${PSQL[@]}" -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')") ||
    die "cannot reach the primary"
((sync >= 1)) || die "the primary has no synchronous standby now: nothing to measure"
"${PSQL[@]}" -c "INSERT INTO events (event_id, currency, hold_ttl_seconds,
    checkout_extension_seconds, max_hold_seconds, max_per_buyer)
    VALUES ('bench-replay', 'EUR', 300, 300, 900, 0) ON CONFLICT DO NOTHING" >/dev/null ||
    die "creating the replay event failed"

TAG=s$(date +%s)
declare -A TPS=() LAT=()
for ((r = 1; r <= REPS; r++)); do
    for mode in sync local; do
        run=$TAG$r$mode
        "${PSQL[@]}" -c "INSERT INTO seats (event_id, seat_id, section, price)
            SELECT 'bench-replay', 'r$run-' || c || '-' || n, 'R', 100
              FROM generate_series(0, $((CLIENTS - 1))) c, generate_series(1, $PER) n
            ON CONFLICT DO NOTHING" >/dev/null || die "creating the replay seats failed"
        opts=
        [[ $mode == local ]] && opts='-c synchronous_commit=local'
        say "$r/$REPS $mode: pgbench -c $CLIENTS -t $PER (pg_saga.sql)"
        PGOPTIONS=$opts timeout 600 pgbench -n -h "$HOSTS" -p "$PORTS" -U onsale -c "$CLIENTS" \
            -j 2 -t "$PER" -D run="$run" -D n=0 -f "$LIB/pg_saga.sql" onsale \
            >"$OUT/$mode.$r" 2>&1 || { tail -n 20 "$OUT/$mode.$r" >&2; die "pgbench failed"; }
        TPS[$mode.$r]=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$OUT/$mode.$r")
        LAT[$mode.$r]=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$OUT/$mode.$r")
        [[ -n ${TPS[$mode.$r]} ]] || { cat "$OUT/$mode.$r" >&2; die "pgbench printed no tps"; }
    done
done

printf '\nsynchronous commit cost per confirmation (pg_saga.sql: %s commits; %s clients, %s confirmations each)\n' \
    "$(grep -c '^SELECT' "$LIB/pg_saga.sql")" "$CLIENTS" "$PER"
printf '%-6s %-22s %s\n' mode 'confirmations/s' 'latency per confirmation (ms)'
for mode in sync local; do
    t=() l=()
    for ((r = 1; r <= REPS; r++)); do t+=("${TPS[$mode.$r]}") l+=("${LAT[$mode.$r]}"); done
    printf '%-6s %-22s %s\n' "$mode" "${t[*]} " "${l[*]} "
    declare "MT_$mode=$(median "${t[@]}")" "ML_$mode=$(median "${l[@]}")"
done
# shellcheck disable=SC2154 # MT_*, ML_* are set by declare above
awk -v ts="$MT_sync" -v tl="$MT_local" -v ls="$ML_sync" -v ll="$ML_local" 'BEGIN {
    printf "median  sync %.1f/s %.2f ms, local %.1f/s %.2f ms: +%.2f ms per confirmation (%.0f%% of the throughput kept)\n",
        ts, ls, tl, ll, ls - ll, 100 * ts / tl }'
printf 'load average: %s\n' "$(bench_load)"
