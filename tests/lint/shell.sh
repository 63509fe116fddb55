#!/usr/bin/env bash
# tests/lint/shell.sh ROOT — every shell script of the tree passes shellcheck (docs/style.md,
# "Format and checks"): the tracked *.sh files and the extension-less scripts whose first
# line names a shell (deploy/onsale, .ci/run, debian/onsale.postinst), including the
# parts deploy/onsale sources (deploy/lib/), followed from their callers (-x). Exit 1 with shellcheck's findings when any file has one.
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}
cd "$ROOT"
command -v shellcheck >/dev/null || {
    echo "lint.shell: shellcheck is not installed (deploy/onsale test installs it)" >&2
    exit 1
}
files=()
while IFS= read -r f; do
    [[ -f $f ]] || continue
    if [[ $f == *.sh ]] || head -n 1 "$f" | grep -Eq '^#!(/usr/bin/env (ba)?sh|/bin/(ba)?sh)'; then
        files+=("$f")
    fi
done < <(git ls-files 2>/dev/null || find . -type f -not -path './build*' -printf '%P\n')
((${#files[@]} > 0)) || { echo "lint.shell: no shell scripts found" >&2; exit 1; }
shellcheck -x "${files[@]}"
echo "lint.shell: ${#files[@]} files clean"
