#!/usr/bin/env bash
# deploy_files.sh ROOT — the production files under deploy/ are valid for the tools that
# read them: Prometheus alert rules (promtool check rules + their unit tests), the HAProxy
# template (haproxy -c, with the CA path pointed at a real file), and the systemd units
# (systemd-analyze verify, with ExecStart pointed at an existing binary; any warning
# fails). A tool that is missing fails the check, except systemd-analyze in a machine
# without systemd (a container), where the units are reported as not checked.
set -uo pipefail
ROOT=${1:?usage: deploy_files.sh ROOT}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd "$ROOT/deploy/prometheus" && promtool check rules onsale-alerts.yml && promtool test rules onsale-alerts.test.yml) ||
    { echo "deploy_files: Prometheus rules FAILED"; fail=1; }
(cd "$ROOT/deploy/prometheus" && promtool check rules onsale-postgres-alerts.yml &&
    promtool test rules onsale-postgres-alerts.test.yml) ||
    { echo "deploy_files: Prometheus rules (Postgres) FAILED"; fail=1; }

sed "s#/etc/onsale/ca.pem#/etc/ssl/certs/ca-certificates.crt#g; s#^\(    stats socket\).*#\1 $tmp/haproxy.sock#; s#^    \(user\|group\|daemon\).*##" \
    "$ROOT/deploy/haproxy/onsale.cfg" >"$tmp/haproxy.cfg"
if haproxy -c -q -f "$tmp/haproxy.cfg"; then
    echo "deploy_files: deploy/haproxy/onsale.cfg valid"
else
    echo "deploy_files: deploy/haproxy/onsale.cfg FAILED"
    fail=1
fi

if command -v systemd-analyze >/dev/null 2>&1; then
    for u in "$ROOT"/deploy/systemd/*.service; do
        name=$(basename "$u")
        name=${name/@./@1.}
        sed "s#^ExecStart=[^ ]*#ExecStart=/bin/true#" "$u" >"$tmp/$name"
        out=$(systemd-analyze verify "$tmp/$name" 2>&1 | grep -v -e 'Failed to connect' -e 'bus' || true)
        if [[ -n $out ]]; then
            printf 'deploy_files: %s:\n%s\n' "$u" "$out"
            fail=1
        else
            echo "deploy_files: $(basename "$u") valid"
        fi
    done
else
    echo "deploy_files: systemd-analyze not installed: systemd units not checked"
fi
exit $fail
