#!/usr/bin/env bash
# deploy_files.sh ROOT — the production files under deploy/ are valid for the tools that
# read them: Prometheus alert rules (promtool check rules + their unit tests), the HAProxy
# template (haproxy -c, with the CA path pointed at a real file), and the systemd units
# (systemd-analyze verify, with ExecStart pointed at an existing binary; any warning
# fails; and systemd-analyze security --offline: an exposure above 2.0 fails). A tool that is missing fails the check, except systemd-analyze in a machine
# without systemd (a container), where the units are reported as not checked.
set -uo pipefail
ROOT=${1:?usage: deploy_files.sh ROOT}
fail=0
MAX_EXPOSURE=2.0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd "$ROOT/deploy/prometheus" && promtool check rules onsale-alerts.yml && promtool test rules onsale-alerts.test.yml) ||
    { echo "deploy_files: Prometheus rules FAILED"; fail=1; }
(cd "$ROOT/deploy/prometheus" && promtool check rules onsale-postgres-alerts.yml &&
    promtool test rules onsale-postgres-alerts.test.yml) ||
    { echo "deploy_files: Prometheus rules (Postgres) FAILED"; fail=1; }

# Every alert has a summary, a description and a runbook_url whose #anchor is a heading of
# docs/operations.md (GitHub's anchor: the heading lower-cased).
anchors=$(sed -n 's/^#\{2,4\} \(.*\)/\1/p' "$ROOT/docs/operations.md" | tr '[:upper:]' '[:lower:]' | tr ' ' '-')
rules=("$ROOT/deploy/prometheus/onsale-alerts.yml" "$ROOT/deploy/prometheus/onsale-postgres-alerts.yml")
for f in "${rules[@]}"; do
    alerts=$(grep -c '^      - alert: ' "$f")
    for key in summary description runbook_url; do
        n=$(grep -c "^          $key: " "$f")
        if ((n != alerts)); then
            echo "deploy_files: ${f##*/}: $alerts alerts but $n with $key"
            fail=1
        fi
    done
done
while read -r url; do
    anchor=${url#*#}
    if [[ $url != file:///usr/share/doc/onsale/operations.md#* ]] || ! grep -qxF "$anchor" <<<"$anchors"; then
        echo "deploy_files: runbook_url $url: no such section in docs/operations.md"
        fail=1
    fi
done < <(sed -n 's/^ *runbook_url: "\(.*\)"$/\1/p' "${rules[@]}")

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
        # The sandbox must stay tight: an exposure above MAX_EXPOSURE fails (offline: no
        # running manager needed, systemd >= 252).
        score=$(systemd-analyze security --offline=true "$tmp/$name" 2>&1 |
            sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
        if [[ -z $score ]]; then
            printf 'deploy_files: %s: systemd-analyze security gave no score\n' "$u"
            fail=1
        elif awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s > m) }'; then
            printf 'deploy_files: %s: exposure %s above %s (systemd-analyze security)\n' \
                "$u" "$score" "$MAX_EXPOSURE"
            fail=1
        else
            echo "deploy_files: $(basename "$u") exposure $score (at most $MAX_EXPOSURE)"
        fi
    done
else
    echo "deploy_files: systemd-analyze not installed: systemd units not checked"
fi
exit $fail
