#!/usr/bin/env bash
# loadgen/sim/run-faults.sh [scenario] [onsale-sim options] — the faults night against the
# running local stack: starts a second gateway on its own port against the same Redis
# (the stack's gateway.conf with another port, as tests/integration/test_sim.py does),
# runs `deploy/onsale sim` with both gateways (the scenario kills the second one through
# ONSALE_SIM_GATEWAY2_PID), then stops the second gateway if it still runs.
#
#   ONSALE_SIM_GATEWAY2_PORT   port of the second gateway (default: gateway port + 10)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
CTL=$ROOT/deploy/onsale
scenario=${1:-$ROOT/loadgen/scenarios/faults.json}
shift || true
eval "$("$CTL" env)"
port=${ONSALE_SIM_GATEWAY2_PORT:-$((ONSALE_GATEWAY_PORT + 10))}
conf=$ONSALE_STATE/gateway-2.conf
[[ -r $ONSALE_STATE/gateway.conf ]] || { echo "run-faults: no gateway in $ONSALE_STATE (deploy/onsale up)" >&2; exit 2; }
sed -e "s/^port = .*/port = $port/" \
    -e "s/^admin_listen = .*/admin_listen = 127.0.0.1:$((port + 20))/" \
    "$ONSALE_STATE/gateway.conf" >"$conf"
# The config's port wins only without ONSALE_GATEWAY_* in the environment.
env -u ONSALE_GATEWAY_PORT -u ONSALE_GATEWAY_URL -u ONSALE_GATEWAY_ADMIN_URL \
    "$ONSALE_BUILD/gateway/onsale-gateway" --config "$conf" \
    >>"$ONSALE_STATE/log/gateway-2.log" 2>&1 </dev/null &
gw2=$!
trap 'kill "$gw2" 2>/dev/null || true; wait "$gw2" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    curl -sf -o /dev/null --cacert "$ONSALE_CA" "https://127.0.0.1:$port/readyz" && break
    kill -0 "$gw2" 2>/dev/null || { echo "run-faults: gateway 2 exited (log $ONSALE_STATE/log/gateway-2.log)" >&2; exit 2; }
    sleep 0.1
done
set +e
ONSALE_SIM_GATEWAYS=https://127.0.0.1:$port ONSALE_SIM_GATEWAY2_PID=$gw2 "$CTL" sim "$scenario" "$@"
rc=$?
exit $rc
