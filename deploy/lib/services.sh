# deploy/lib/services.sh — our services and `up`.
# Sourced by deploy/onsale (the entry point: its header says what each command does), in
# the order it lists; not a program of its own.
# shellcheck shell=bash
# The parts share their variables (defined in one, used in others): checked one at a time
# they would look unused or unassigned.
# shellcheck disable=SC2034,SC2153

# ---------------------------------------------------------------------------------------
# our services. Each is one function: write its config, start_service, wait_ready.

# The fans' listen_addr of a gateway or reserve: ONSALE_LISTEN in the single topology;
# behind HAProxy (cluster) the instances stay on loopback and HAProxy binds ONSALE_LISTEN.
fans_listen() {
    if [[ $TOPOLOGY == cluster ]]; then printf '127.0.0.1'; else printf '%s' "$LISTEN"; fi
}

# ONSALE_LISTEN: 127.0.0.1 (the default) or 0.0.0.0 (every address of this machine, with
# a loud warning). Nothing in between: the readiness checks and the dev certificate name
# 127.0.0.1, which a listener on 0.0.0.0 answers too.
check_listen() {
    case $LISTEN in
    127.0.0.1) return 0 ;;
    0.0.0.0) ;;
    *) die "ONSALE_LISTEN='$LISTEN': expected 127.0.0.1 (the default) or 0.0.0.0 (every address)" ;;
    esac
    local ports="${PORT[GATEWAY]} (gateway), ${PORT[RESERVE]} (reserve)"
    [[ $TOPOLOGY != cluster ]] || ports="${PORT[HAPROXY]}, $((PORT[HAPROXY] + 1)) (HAProxy)"
    say "WARNING: ONSALE_LISTEN=$LISTEN: ports $ports accept connections from other"
    say "WARNING: machines, with development secrets and a dev CA: on a throwaway VM only, never"
    say "WARNING: on a shared or public network. Admin listeners, Redis, Postgres and paysim stay"
    say "WARNING: on 127.0.0.1."
}

# Config lines both services share: where Redis is; behind HAProxy (cluster topology),
# the PROXY v2 source and the drain grace (above HAProxy's check inter 250 ms x fall 2).
redis_conf() {
    if [[ $TOPOLOGY == cluster ]]; then
        printf 'redis_cluster = %s\nproxy_from = 127.0.0.1\ndrain_grace_ms = 1500\n' "$REDIS_SEEDS"
    else
        printf 'redis_host = 127.0.0.1\nredis_port = %s\n' "${PORT[REDIS]}"
    fi
    if [[ $REDIS_TLS == 1 ]]; then
        printf 'redis_tls = on\nredis_tls_ca_file = %s\n' "$CA"
        printf 'redis_tls_cert_file = %s\nredis_tls_key_file = %s\n' "$STATE/server.pem" \
            "$STATE/server-key.pem"
    fi
}

# start_reserve [NAME PORT]: one reserve (default: "reserve" on ONSALE_RESERVE_PORT).
start_reserve() {
    local name=${1:-reserve} port=${2:-${PORT[RESERVE]}}
    [[ -x $RESERVE_BIN ]] || die "$RESERVE_BIN not built (run '$PROG build')"
    cat >"$STATE/$name.conf.tmp" <<EOF
# written by deploy/onsale up; regenerated on every start. Keys: deploy/reserve.conf.example
listen_addr = $(fans_listen)
port = $port
tls_cert = $STATE/server.pem
tls_key = $STATE/server-key.pem
$(redis_conf)
redis_user = $REDIS_RESERVE_USER
redis_password_file = $REDIS_RESERVE_PASSWORD_FILE
pg_conninfo = "$PG_CONNINFO"
pg_password_file = $PG_PASSWORD_FILE
admission_keys = $ADMISSION_PUB
admin_token_file = $ADMIN_TOKEN_FILE
admin_listen = 127.0.0.1:$((port + ADMIN_OFFSET))
paysim_url = $PAYSIM_URL
paysim_ca = $CA
pay_webhook_secrets_file = $PAY_WEBHOOK_SECRET_FILE
pay_return_url = $RESERVE_URL/shop/
shop_queue_url = $GATEWAY_URL/q/{event}
log_level = info
EOF
    mv -f "$STATE/$name.conf.tmp" "$STATE/$name.conf"
    start_service "$name" "$port" "$RESERVE_BIN" --config "$STATE/$name.conf"
    wait_ready "$name" "https://127.0.0.1:$port/readyz"
}

# Started only once the binary exists. It signs admission tokens with the key whose
# public half the reserve verifies with; the queue-ticket HMAC secret is created here.
# start_gateway [NAME PORT]: one gateway (default: "gateway" on ONSALE_GATEWAY_PORT).
start_gateway() {
    local name=${1:-gateway} port=${2:-${PORT[GATEWAY]}}
    tmpdir
    random_secret "$KEYS/ticket-secret"
    random_secret "$KEYS/code-secret"
    make_sale_site_key
    cat >"$STATE/$name.conf.tmp" <<EOF
# written by deploy/onsale up; regenerated on every start. Keys: onsale-gateway --help
listen_addr = $(fans_listen)
port = $port
tls_cert = $STATE/server.pem
tls_key = $STATE/server-key.pem
$(redis_conf)
redis_user = $REDIS_GATEWAY_USER
redis_password_file = $REDIS_GATEWAY_PASSWORD_FILE
signing_keys = $ADMISSION_KEY
ticket_secret_file = $KEYS/ticket-secret
code_secret_file = $KEYS/code-secret
enqueue_keys_file = $SALE_SITE_PUB
enqueue_issuer = https://shop.example
admin_token_file = $GATEWAY_ADMIN_TOKEN_FILE
admin_listen = 127.0.0.1:$((port + ADMIN_OFFSET))
reserve_url = $RESERVE_URL
log_level = info
EOF
    mv -f "$STATE/$name.conf.tmp" "$STATE/$name.conf"
    start_service "$name" "$port" "$GATEWAY_BIN" --config "$STATE/$name.conf"
    wait_ready "$name" "https://127.0.0.1:$port/readyz"
}
# HAProxy in TCP mode (TLS stays with the gateway and the reserve): the fan's address goes
# on by PROXY v2; /readyz over TLS decides who gets traffic. deploy/haproxy/onsale.cfg is
# the production template this mirrors.
start_haproxy() {
    local i front=${PORT[HAPROXY]}
    need haproxy
    {
        cat <<EOF
# written by deploy/onsale up (cluster topology); regenerated on every start.
# Production template: deploy/haproxy/onsale.cfg
global
    log stderr format short local0 info
    maxconn 4096
    stats socket $RUN/haproxy.sock mode 600 level admin

defaults
    mode tcp
    log global
    option tcplog
    option dontlognull
    timeout connect 2s
    timeout client 75s
    timeout server 75s
    timeout check 2s
    # a refused or reset connect goes to another server, not to the fan
    retries 3
    option redispatch 1
    default-server check inter 250ms fall 2 rise 2 send-proxy-v2 check-ssl verify required ca-file $CA verifyhost localhost check-sni localhost

frontend gateway
    bind $LISTEN:$front
    default_backend gateways

frontend reserve
    bind $LISTEN:$((front + 1))
    default_backend reserves

backend gateways
    balance leastconn
    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost
    http-check expect status 200
EOF
        for i in "${!GATEWAY_PORTS[@]}"; do
            [[ -x $GATEWAY_BIN ]] || break # a reserve-only stack: no gateway servers
            printf '    server gateway-%d 127.0.0.1:%s\n' $((i + 1)) "${GATEWAY_PORTS[$i]}"
        done
        cat <<EOF

backend reserves
    balance leastconn
    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost
    http-check expect status 200
EOF
        for i in "${!RESERVE_PORTS[@]}"; do
            printf '    server reserve-%d 127.0.0.1:%s\n' $((i + 1)) "${RESERVE_PORTS[$i]}"
        done
    } >"$STATE/haproxy.cfg.tmp"
    haproxy -c -q -f "$STATE/haproxy.cfg.tmp" >"$LOG/haproxy-check.log" 2>&1 ||
        { cat "$LOG/haproxy-check.log" >&2; die "haproxy rejected $STATE/haproxy.cfg.tmp"; }
    mv -f "$STATE/haproxy.cfg.tmp" "$STATE/haproxy.cfg"
    if ! svc_running haproxy && port_in_use $((PORT[HAPROXY] + 1)); then
        die "cannot start haproxy: 127.0.0.1:$((PORT[HAPROXY] + 1)) is already in use"
    fi
    start_service haproxy "${PORT[HAPROXY]}" haproxy -db -f "$STATE/haproxy.cfg"
    wait_ready haproxy "$RESERVE_URL/readyz"
    if svc_running gateway-1; then wait_ready haproxy "$GATEWAY_URL/readyz"; fi
}

# Started only once the binary exists (before the reserve, which calls it). Its ledger
# survives restarts, so a reconciler can still ask it about a charge by idempotency key.
start_paysim() {
    mkdir -p "$STATE/paysim"
    cat >"$STATE/paysim.conf.tmp" <<EOF
# written by deploy/onsale up; regenerated on every start. Keys: onsale-paysim --help
listen_addr = 127.0.0.1
port = ${PORT[PAYSIM]}
tls_cert = $STATE/server.pem
tls_key = $STATE/server-key.pem
ledger_file = $STATE/paysim/ledger
webhook_url = $RESERVE_URL/v1/provider/webhook
webhook_secret_file = $PAY_WEBHOOK_SECRET_FILE
webhook_ca_file = $CA
log_level = info
EOF
    mv -f "$STATE/paysim.conf.tmp" "$STATE/paysim.conf"
    start_service paysim "${PORT[PAYSIM]}" "$PAYSIM_BIN" --config "$STATE/paysim.conf"
    wait_ready paysim "$PAYSIM_URL/healthz"
}

# admin_put URL JSON TOKEN_FILE: PUT with that service's admin token (passed on curl's stdin
# config, so it never shows in ps). Prints the HTTP status; the body goes to $TMP/admin_body.
admin_put() {
    tmpdir
    printf 'header = "Authorization: Bearer %s"\n' "$(cat "$3")" |
        curl -s -K - -o "$TMP/admin_body" -w '%{http_code}' --max-time 10 --cacert "$CA" \
            -X PUT -H 'Content-Type: application/json' --data-binary "$2" "$1" || true
}

# seed NAME URL JSON TOKEN_FILE: PUT an admin document; 200 and 201 both mean done.
seed() {
    local code
    code=$(admin_put "$2" "$3" "$4")
    case $code in
    200 | 201) say "$1: demo event seeded (PUT /admin/events/demo: $code)" ;;
    *)
        cat "$TMP/admin_body" >&2 2>/dev/null || true
        die "seeding the demo event failed: PUT $2 answered $code"
        ;;
    esac
}

seed_demo() {
    seed reserve "$RESERVE_ADMIN_URL/admin/events/demo" "$DEMO_EVENT" "$ADMIN_TOKEN_FILE"
    if svc_running gateway || svc_running gateway-1; then
        seed gateway "$GATEWAY_ADMIN_URL/admin/events/demo" "$(demo_room)" "$GATEWAY_ADMIN_TOKEN_FILE"
    fi
}

print_summary() {
    local tok='' s
    tmpdir
    printf '\nonsale local stack (state %s)\n' "$STATE"
    for s in reserve gateway paysim; do
        if svc_running "$s" || svc_running "$s-1"; then
            case $s in
            reserve) printf '  %-9s %s   (storefront %s/shop/?event=demo)\n' reserve "$RESERVE_URL" "$RESERVE_URL" ;;
            gateway) printf '  %-9s %s   (queue page %s/q/demo)\n' gateway "$GATEWAY_URL" "$GATEWAY_URL" ;;
            paysim) printf '  %-9s %s\n' paysim "$PAYSIM_URL" ;;
            esac
        fi
    done
    printf '  %-9s 127.0.0.1:%s%s\n' redis "${PORT[REDIS]}" "$( ((REDIS_TLS)) && echo '   (TLS only: redis-cli --tls, see README)')"
    printf '  %-9s %s\n' postgres "$PG_CONNINFO"
    printf '  %-9s %s\n' 'CA' "$CA"
    printf '  %-9s %s  (reserve admin API, e.g. the configuration; token %s)\n' 'admin' \
        "$RESERVE_ADMIN_URL/admin/config" "$ADMIN_TOKEN_FILE"
    printf '  %-9s %s  (dashboard; token %s)\n' 'admin' "$GATEWAY_ADMIN_URL/admin/" "$GATEWAY_ADMIN_TOKEN_FILE"
    printf '  %-9s %s\n' 'logs' "$LOG"
    if [[ $LISTEN != 127.0.0.1 ]]; then
        printf '  %-9s gateway and reserve ports bound on %s (ONSALE_LISTEN): reachable from other machines\n' \
            'WARNING' "$LISTEN"
    fi
    if [[ $TOPOLOGY == cluster ]]; then
        printf '  %-9s %s (gateway-1..2 %s, reserve-1..2 %s behind HAProxy)\n' 'cluster' \
            "redis $REDIS_SEEDS" "${GATEWAY_PORTS[*]}" "${RESERVE_PORTS[*]}"
    fi
    if ! svc_running reserve && ! svc_running reserve-1; then
        return 0
    fi
    if [[ ! -x $TOKEN_BIN ]]; then
        say "no sample admission token: $TOKEN_BIN not built"
    elif tok=$("$TOKEN_BIN" --key "$ADMISSION_KEY" --event demo --sub demo-fan 2>"$TMP/token_err") &&
        [[ -n $tok ]]; then
        printf '\nSample admission token (event demo, sub demo-fan, valid 10 minutes):\n  %s\n' "$tok"
        printf '\nTake a hold with it:\n'
        printf "  curl -sS --cacert %s -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"seats\":[\"A-1-1\"]}' %s/v1/events/demo/holds\n" \
            "$CA" "$tok" "$RESERVE_URL"
    else
        say "warning: could not mint a sample admission token with $TOKEN_BIN: $(cat "$TMP/token_err" 2>/dev/null)"
    fi
    printf '\nStop it with: %s down   (with the same ONSALE_STATE)\n' "$PROG"
}

cmd_up() {
    check_listen
    [[ ${ONSALE_SKIP_DEPS:-0} == 1 ]] || cmd_deps run
    [[ ${ONSALE_SKIP_BUILD:-0} == 1 ]] || cmd_build
    need curl flock setsid
    lock_state
    check_ports
    UP_RUNNING=1 # from here on a failure stops what this `up` started (rollback_up)
    make_state
    if [[ $TOPOLOGY == cluster ]]; then
        start_redis_cluster
        start_pg_cluster
    else
        start_redis
        start_pg
    fi
    if [[ ${ONSALE_INFRA_ONLY:-0} == 1 ]]; then
        say "ONSALE_INFRA_ONLY=1: Redis and Postgres only"
        UP_RUNNING=0
        print_summary
        return 0
    fi
    if [[ -x $PAYSIM_BIN ]]; then start_paysim; fi
    if [[ $TOPOLOGY == cluster ]]; then
        local i
        for i in "${!RESERVE_PORTS[@]}"; do start_reserve "reserve-$((i + 1))" "${RESERVE_PORTS[$i]}"; done
        if [[ -x $GATEWAY_BIN ]]; then
            for i in "${!GATEWAY_PORTS[@]}"; do start_gateway "gateway-$((i + 1))" "${GATEWAY_PORTS[$i]}"; done
        fi
        start_haproxy
    else
        start_reserve
        if [[ -x $GATEWAY_BIN ]]; then start_gateway; fi
    fi
    [[ ${ONSALE_SEED:-1} == 0 ]] || seed_demo
    UP_RUNNING=0
    print_summary
}
