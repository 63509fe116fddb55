#!/bin/sh
# A fan's purchase with curl: join the waiting room → poll until admitted → take a hold
# on the first available seat → extend it at checkout → pay with the simulator's test
# card → booked. Against the local stack:
#
#   deploy/onsale up
#   eval "$(deploy/onsale env)"
#   sh docs/examples/curl.sh            # EVENT=demo by default
#
# Needs curl and jq. Prints each step; exits non-zero at the first error answer (its
# JSON body says why, e.g. {"error":"seat_unavailable",...} if another fan was faster).
set -eu
: "${ONSALE_GATEWAY_URL:?run: eval \"\$(deploy/onsale env)\"}"
EVENT=${EVENT:-demo}
CARD=${CARD:-tok_visa}
api() { curl -sS --fail-with-body --cacert "$ONSALE_CA" "$@"; }

# 1. join: the body holds the queue ticket (browsers get it as a cookie too). A room with
#    proof of work on (docs/api.md) answers 428 with a challenge: pow.py solves it.
join=$(curl -sS --cacert "$ONSALE_CA" -X POST "$ONSALE_GATEWAY_URL/q/$EVENT/join")
if [ "$(printf '%s' "$join" | jq -r '.error // empty')" = pow_required ]; then
    proof=$(printf '%s' "$join" | jq -r '.pow | "\(.challenge) \(.difficulty)"' | {
        read -r c d
        echo "$c.$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import pow; print(pow.solve(sys.argv[2], int(sys.argv[3])))' "$(dirname "$0")" "$c" "$d")"
    })
    join=$(api -X POST -H "Onsale-Pow: $proof" "$ONSALE_GATEWAY_URL/q/$EVENT/join")
fi
ticket=$(printf '%s' "$join" | jq -r .ticket)
echo "joined: $(printf '%s' "$join" | jq -c '{state, position, queue_size, eta_seconds}')"

# 2. poll no sooner than poll_after_ms until admitted
while :; do
    st=$(api -H "Authorization: Bearer $ticket" "$ONSALE_GATEWAY_URL/q/$EVENT/status")
    state=$(printf '%s' "$st" | jq -r .state)
    [ "$state" = admitted ] && break
    echo "waiting: $(printf '%s' "$st" | jq -c '{state, position, eta_seconds}')"
    sleep "$(printf '%s' "$st" | jq '[(.poll_after_ms // 1000) / 1000 | ceil, 1] | max')"
done
token=$(printf '%s' "$st" | jq -r .admission_token)
echo "admitted; the token is valid until $(printf '%s' "$st" | jq -r .expires_at)"

# 3. a seat that looks free (the seat map is public and may lag a second)
seat=$(api "$ONSALE_RESERVE_URL/v1/events/$EVENT/seats" |
    jq -r '[.seats[] | select(.status == "available")][0].id')
hold=$(api -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "{\"seats\":[\"$seat\"]}" "$ONSALE_RESERVE_URL/v1/events/$EVENT/holds")
hold_id=$(printf '%s' "$hold" | jq -r .hold_id)
echo "held: $(printf '%s' "$hold" | jq -c '{seats, amount, currency, expires_at}')"

# 4. checkout: extend the hold, then pay once (the key makes a retry the same purchase)
api -X POST -H "Authorization: Bearer $token" "$ONSALE_RESERVE_URL/v1/holds/$hold_id/extend" |
    jq -c '{extended_until: .expires_at}'
payment=$(printf '%s' "$hold" | jq -c --arg card "$CARD" \
    '{payment: {amount: .amount, currency: .currency, source: $card}}')
key=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
booking=$(api -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -H "Idempotency-Key: $key" -d "$payment" "$ONSALE_RESERVE_URL/v1/holds/$hold_id/confirm")
echo "booked: $(printf '%s' "$booking" | jq -c '{booking_id, seats, amount, currency}')"
