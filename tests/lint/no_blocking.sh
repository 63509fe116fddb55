#!/usr/bin/env bash
# tests/lint/no_blocking.sh <repo> — the event loop never blocks (docs/style.md).
#
# Scans the server sources (gateway/*.c, reserve/*.c, loadgen/paysim/*.c) for blocking
# calls: PQexec*, PQconnectdb*, redisCommand*, redisConnect*, curl_easy_perform,
# curl_multi_perform/_wait/_poll (libcurl runs only through curl_multi_socket_action), getaddrinfo,
# evutil_getaddrinfo, gethostbyname, sleep, usleep, nanosleep, fopen, popen, system.
# Comments and string literals are ignored, so a comment may name them.
#
# Allowed:
#   - a line carrying the marker  /* blocking-ok: <reason> */  — only for start-up code
#     that runs before event_base_dispatch (config files, key loading, …);
#   - the body of reserve/rsv_pg.c's rsv_pg_migrate() (synchronous, start-up only).
#     Helpers it calls are not covered: mark their lines.
#
# Exit 0 when clean; 1 listing file:line of every unmarked call; 2 on usage errors.
# Registered in ctest as lint.blocking.
set -euo pipefail

repo=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}
[[ -d $repo ]] || {
    echo "usage: $0 <repo>" >&2
    exit 2
}
cd "$repo"

shopt -s nullglob
files=(gateway/*.c reserve/*.c loadgen/paysim/*.c)
shopt -u nullglob

if ((${#files[@]} == 0)); then
    echo "no_blocking: no sources under gateway/ reserve/ loadgen/paysim/ — nothing to check"
    exit 0
fi

# Per file: strip comments and literals (keeping line numbers), track brace depth to know
# when we are inside an exempt function, report matches on unmarked lines.
# EXEMPT is "file:function file:function …".
out=$(awk -v EXEMPT="reserve/rsv_pg.c:rsv_pg_migrate" '
BEGIN {
    calls = "(PQexec[A-Za-z]*|PQconnectdb[A-Za-z]*|redisCommand[A-Za-z]*|redisConnect[A-Za-z]*|" \
            "curl_easy_perform|curl_multi_perform|curl_multi_wait|curl_multi_poll|" \
            "evutil_getaddrinfo|getaddrinfo|gethostbyname|nanosleep|usleep|sleep|fopen|popen|system)"
    pat = "(^|[^A-Za-z0-9_])" calls "[ \t]*\\("
    marker = "/\\*[ \t]*blocking-ok:[ \t]*[^ \t*][^*]*\\*/"
    nex = split(EXEMPT, ex, " ")
}
FNR == 1 {
    incomment = 0; depth = 0; pending = 0; inexempt = 0
    exfn = ""
    for (i = 1; i <= nex; i++) {
        split(ex[i], pair, ":")
        if (pair[1] == FILENAME) exfn = pair[2]
    }
}
{
    line = $0
    code = ""
    n = length(line)
    i = 1
    while (i <= n) {
        c = substr(line, i, 1)
        two = substr(line, i, 2)
        if (incomment) {
            if (two == "*/") { incomment = 0; i += 2; code = code " " } else i++
            continue
        }
        if (two == "/*") { incomment = 1; i += 2; continue }
        if (two == "//") break
        if (c == "\"" || c == "\047") {
            q = c; i++
            while (i <= n) {
                d = substr(line, i, 1)
                if (d == "\\") { i += 2; continue }
                i++
                if (d == q) break
            }
            code = code q q
            continue
        }
        code = code c
        i++
    }
    # Exempt function: a definition of exfn at file scope, then its brace-balanced body.
    startdepth = depth
    if (exfn != "" && depth == 0 && code ~ ("(^|[^A-Za-z0-9_])" exfn "[ \t]*\\(")) pending = 1
    exline = inexempt
    m = length(code)
    for (k = 1; k <= m; k++) {
        d = substr(code, k, 1)
        if (d == "{") {
            if (depth == 0 && pending) { inexempt = 1; pending = 0; exline = 1 }
            depth++
        } else if (d == "}") {
            if (depth > 0) depth--
            if (depth == 0 && inexempt) inexempt = 0
        } else if (d == ";" && depth == 0) {
            pending = 0 # a prototype, not the definition
        }
    }
    if (pending) exline = 1 # the definition line(s) themselves
    if (exline) next
    if (code ~ pat && line !~ marker) {
        s = line
        sub(/^[ \t]+/, "", s)
        printf "%s:%d: %s\n", FILENAME, FNR, s
    }
}
' "${files[@]}")

if [[ -n $out ]]; then
    printf '%s\n' "$out"
    count=$(printf '%s\n' "$out" | wc -l)
    printf 'no_blocking: %d blocking call(s) in event-loop code. Use the async API; a call that runs\n' "$count"
    printf 'only at start-up, before event_base_dispatch, may carry /* blocking-ok: <reason> */.\n'
    exit 1
fi
echo "no_blocking: ${#files[@]} files clean"
