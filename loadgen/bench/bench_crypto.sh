#!/usr/bin/env bash
# loadgen/bench/bench_crypto.sh — admission-token crypto per core beside OpenSSL (issue 9).
#
# In one run, alternating so both see the same machine, REPS times each:
#   ours     onsale-bench-crypto: cm_jwt_sign (claims JSON, base64url, SHA-256, ECDSA P-256,
#            DER → JOSE R||S) and cm_jwt_verify (header judged, claims parsed, JOSE → DER,
#            ECDSA verify, policy) on one thread — what the gateway's signer and the
#            reserve's verifier do per token
#   openssl  `openssl speed ecdsap256`: the bare ECDSA sign/verify of a digest
#   dpop     gw_dpop_verify: a DPoP proof checked as on a "dpop" room's admitting poll
#            (JSON, thumbprint, the key built from the proof's jwk, ECDSA verify); shown
#            beside openssl's bare verify, no goal
# Both divide by CPU time (openssl speed's default), so other load on the machine does not
# skew the ratio. Prints every repetition, the medians, the ratios (goal ≥ 0.7×) and the
# CPU microseconds per operation.
#
# Usage: loadgen/bench/bench_crypto.sh [--skip-build] [--reps N] [--seconds S]
# Environment: ONSALE_BUILD (build dir, default <checkout>/build), ONSALE_SKIP_BUILD=1.
# Exit status: 0 measured (whatever the verdicts), 1 the benchmark could not run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
PROG=bench_crypto
# shellcheck source=loadgen/bench/lib.sh
. "$ROOT/loadgen/bench/lib.sh"
BUILD=${ONSALE_BUILD:-$ROOT/build}
SKIP_BUILD=${ONSALE_SKIP_BUILD:-0}
REPS=3
SECONDS_EACH=3

while [ $# -gt 0 ]; do
    case "$1" in
    --skip-build) SKIP_BUILD=1 ;;
    --reps) REPS=$2; shift ;;
    --seconds) SECONDS_EACH=$2; shift ;;
    -h | --help) bench_usage; exit 0 ;;
    *) printf '%s: unknown argument %s (try --help)\n' "$PROG" "$1" >&2; exit 1 ;;
    esac
    shift
done
bench_positive REPS SECONDS_EACH

if [ "$SKIP_BUILD" != 1 ]; then
    ONSALE_BUILD=$BUILD "$ROOT/deploy/onsale" build >/dev/null
fi
BIN=$BUILD/loadgen/onsale-bench-crypto
[ -x "$BIN" ] || die "$BIN not built"
bench_need '' openssl

ours_sign=() ours_verify=() ssl_sign=() ssl_verify=() ours_dpop=()
printf '%-4s %14s %14s %14s %14s\n' rep "ours sign/s" "ours verify/s" "openssl sign/s" "openssl verify/s"
for ((i = 1; i <= REPS; i++)); do
    out=$("$BIN" --seconds "$SECONDS_EACH")
    os=$(awk '$1=="sign"{print $2}' <<<"$out")
    ov=$(awk '$1=="verify"{print $2}' <<<"$out")
    od=$(awk '$1=="dpop"{print $2}' <<<"$out")
    ours_dpop+=("$od")
    # "256 bits ecdsa (nistp256)   0.0000s   0.0001s  50864.7  15175.2"
    line=$(openssl speed -seconds "$SECONDS_EACH" ecdsap256 2>/dev/null | grep 'nistp256' | tail -1)
    ss=$(awk '{print $(NF-1)}' <<<"$line")
    sv=$(awk '{print $NF}' <<<"$line")
    [[ -n $os && -n $ov && -n $ss && -n $sv ]] || die "a run printed nothing"
    ours_sign+=("$os") ours_verify+=("$ov") ssl_sign+=("$ss") ssl_verify+=("$sv")
    printf '%-4s %14s %14s %14s %14s\n' "$i" "$os" "$ov" "$ss" "$sv"
done
ms=$(median "${ours_sign[@]}")
mv=$(median "${ours_verify[@]}")
rs=$(median "${ssl_sign[@]}")
rv=$(median "${ssl_verify[@]}")
md=$(median "${ours_dpop[@]}")
echo
awk -v ms="$ms" -v mv="$mv" -v rs="$rs" -v rv="$rv" -v md="$md" 'BEGIN {
    printf "%-8s %12s %12s %8s %16s %16s  %s\n", "op", "ours/s", "openssl/s", "ratio", "ours CPU us/op", "openssl CPU us/op", "goal >= 0.7x"
    printf "%-8s %12.0f %12.0f %7.2fx %16.1f %16.1f  %s\n", "sign", ms, rs, ms/rs, 1e6/ms, 1e6/rs, (ms/rs >= 0.7 ? "met" : "NOT met")
    printf "%-8s %12.0f %12.0f %7.2fx %16.1f %16.1f  %s\n", "verify", mv, rv, mv/rv, 1e6/mv, 1e6/rv, (mv/rv >= 0.7 ? "met" : "NOT met")
    printf "%-8s %12.0f %12.0f %7.2fx %16.1f %16.1f  %s\n", "dpop", md, rv, md/rv, 1e6/md, 1e6/rv, "(no goal)"
}'
echo "(medians of $REPS runs of ${SECONDS_EACH}s each, per core, CPU time; $(openssl version))"
