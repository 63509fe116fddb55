# deploy/lib/state.sh — the state directory: dev CA, certificates, secrets, admission keys.
# Sourced by deploy/onsale (the entry point: its header says what each command does), in
# the order it lists; not a program of its own.
# shellcheck shell=bash
# The parts share their variables (defined in one, used in others): checked one at a time
# they would look unused or unassigned.
# shellcheck disable=SC2034,SC2153

# ---------------------------------------------------------------------------------------
# state: dev CA, server certificate, admin token, admission keys (created once, reused)

ec_key() { # ec_key FILE: a new EC P-256 private key, PKCS#8 PEM, mode 600
    (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null) ||
        die "openssl genpkey failed for $1"
}

write_openssl_cnf() {
    cat >"$TMP/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
[dn]
[v3_ca]
basicConstraints = critical,CA:TRUE,pathlen:0
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid,issuer
EOF
}

make_ca() {
    if [[ -s $CA && -s $STATE/ca-key.pem ]]; then
        return 0
    fi
    say "creating dev CA $CA"
    ec_key "$TMP/ca-key.pem"
    openssl req -x509 -new -config "$TMP/openssl.cnf" -extensions v3_ca -key "$TMP/ca-key.pem" \
        -sha256 -days 3650 -subj "/O=onsale local stack/CN=onsale dev CA $(hostname -s 2>/dev/null || echo local) $(date -u +%Y%m%d%H%M%S)" \
        -out "$TMP/ca.pem" 2>"$TMP/err" || { cat "$TMP/err" >&2; die "creating the CA failed"; }
    mv -f "$TMP/ca-key.pem" "$STATE/ca-key.pem"
    mv -f "$TMP/ca.pem" "$CA"
    rm -f "$STATE/server.pem" # signed by a CA that is gone
}

server_cert_ok() {
    [[ -s $STATE/server.pem && -s $STATE/server-key.pem ]] || return 1
    openssl verify -CAfile "$CA" "$STATE/server.pem" >/dev/null 2>&1 || return 1
    openssl x509 -in "$STATE/server.pem" -noout -checkend 604800 >/dev/null 2>&1 || return 1
    [[ $(openssl x509 -in "$STATE/server.pem" -noout -pubkey 2>/dev/null) == \
        "$(openssl pkey -in "$STATE/server-key.pem" -pubout 2>/dev/null)" ]]
}

make_server_cert() {
    server_cert_ok && return 0
    say "creating server certificate $STATE/server.pem (127.0.0.1, localhost)"
    ec_key "$TMP/server-key.pem"
    openssl req -new -config "$TMP/openssl.cnf" -key "$TMP/server-key.pem" \
        -subj "/O=onsale local stack/CN=localhost" -out "$TMP/server.csr" 2>"$TMP/err" ||
        { cat "$TMP/err" >&2; die "creating the server CSR failed"; }
    openssl x509 -req -in "$TMP/server.csr" -CA "$CA" -CAkey "$STATE/ca-key.pem" \
        -set_serial "0x$(openssl rand -hex 15)" -days 825 -sha256 \
        -extfile "$TMP/openssl.cnf" -extensions v3_server -out "$TMP/server.pem" 2>"$TMP/err" ||
        { cat "$TMP/err" >&2; die "signing the server certificate failed"; }
    mv -f "$TMP/server-key.pem" "$STATE/server-key.pem"
    mv -f "$TMP/server.pem" "$STATE/server.pem"
}

# random_secret FILE: 32 random bytes as 64 hex digits, no trailing newline, mode 600.
random_secret() {
    [[ -s $1 ]] && return 0
    say "creating $1"
    (umask 077 && printf '%s' "$(openssl rand -hex 32)" >"$TMP/secret") || die "openssl rand failed"
    mv -f "$TMP/secret" "$1"
}

# key_pair KEY PUB WHAT: an EC P-256 key at KEY (made when missing) and its public half at PUB.
key_pair() {
    local key=$1 pub=$2 what=$3
    if [[ ! -s $key ]]; then
        say "creating $what $key"
        ec_key "$TMP/key.pem"
        mv -f "$TMP/key.pem" "$key"
        rm -f "$pub"
    fi
    if [[ ! -s $pub ]]; then
        openssl pkey -in "$key" -pubout -out "$TMP/pub.pem" 2>/dev/null || die "deriving $pub failed"
        mv -f "$TMP/pub.pem" "$pub"
    fi
}

make_admission_keys() {
    mkdir -p "$KEYS"
    chmod 700 "$KEYS"
    key_pair "$ADMISSION_KEY" "$ADMISSION_PUB" "admission signing key"
}

# The local sale site's key (SALE_SITE_KEY) and the public half the gateways are given.
make_sale_site_key() {
    key_pair "$SALE_SITE_KEY" "$SALE_SITE_PUB" "the sale site's enqueue-token key"
}

make_state() {
    need openssl
    mkdir -p "$STATE" "$RUN" "$LOG"
    # Postgres runs as the postgres user when we are root: it must be able to enter the
    # state dir (a mkdtemp() dir is 0700). The secrets below stay 0600/0700.
    if is_root; then chmod o+x "$STATE"; fi
    tmpdir
    write_openssl_cnf
    make_ca
    make_server_cert
    random_secret "$ADMIN_TOKEN_FILE"
    random_secret "$GATEWAY_ADMIN_TOKEN_FILE"
    random_secret "$PAY_WEBHOOK_SECRET_FILE"
    random_secret "$REDIS_PASSWORD_FILE"
    random_secret "$REDIS_GATEWAY_PASSWORD_FILE"
    random_secret "$REDIS_RESERVE_PASSWORD_FILE"
    random_secret "$PG_PASSWORD_FILE"
    random_secret "$PG_ADMIN_PASSWORD_FILE"
    chmod 600 "$ADMIN_TOKEN_FILE" "$GATEWAY_ADMIN_TOKEN_FILE" "$PAY_WEBHOOK_SECRET_FILE" "$STATE/ca-key.pem" "$STATE/server-key.pem" \
        "$REDIS_PASSWORD_FILE" "$REDIS_GATEWAY_PASSWORD_FILE" "$REDIS_RESERVE_PASSWORD_FILE" \
        "$PG_PASSWORD_FILE" "$PG_ADMIN_PASSWORD_FILE"
    make_admission_keys
}

# Refuse to move a running service: one already running from this state dir keeps its
# port until `down` (the others are configured with that port).
check_ports() {
    local n
    declare -A svc=([GATEWAY]=gateway [RESERVE]=reserve [REDIS]=redis [PG]=postgres [PAYSIM]=paysim [HAPROXY]=haproxy)
    if [[ -n $TOPOLOGY_RECORDED && $TOPOLOGY_RECORDED != "$TOPOLOGY" ]] && any_running; then
        die "the stack in $STATE runs the $TOPOLOGY_RECORDED topology; run '$PROG down' before 'up' with ONSALE_TOPOLOGY=$TOPOLOGY"
    fi
    if [[ -n ${REDIS_TLS_RECORDED:-} && $REDIS_TLS_RECORDED != "$REDIS_TLS" ]] && any_running; then
        die "the stack in $STATE runs with ONSALE_REDIS_TLS=$REDIS_TLS_RECORDED; run '$PROG down' first"
    fi
    if [[ $TOPOLOGY == cluster ]]; then
        svc[GATEWAY]=gateway-1 svc[RESERVE]=reserve-1 svc[REDIS]=redis-1 svc[PG]=pg-1
    fi
    for n in "${PORT_NAMES[@]}"; do
        if [[ -n ${PORT_RECORDED[$n]:-} && ${PORT_RECORDED[$n]} != "${PORT[$n]}" ]] &&
            svc_running "${svc[$n]}"; then
            die "${svc[$n]} from $STATE runs on port ${PORT_RECORDED[$n]}, not ONSALE_${n}_PORT=${PORT[$n]}; run '$PROG down' first"
        fi
    done
    {
        printf '# the stack in this state dir, written by deploy/onsale up\n'
        for n in "${PORT_NAMES[@]}"; do printf 'ONSALE_%s_PORT=%s\n' "$n" "${PORT[$n]}"; done
        printf 'ONSALE_BUILD=%s\n' "$BUILD"
        printf 'ONSALE_TOPOLOGY=%s\n' "$TOPOLOGY"
        printf 'ONSALE_REDIS_TLS=%s\n' "$REDIS_TLS"
    } >"$STACK_FILE.tmp"
    mv -f "$STACK_FILE.tmp" "$STACK_FILE"
}
