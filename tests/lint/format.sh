#!/usr/bin/env bash
# tests/lint/format.sh [repo] — every tracked *.c / *.h is formatted as .clang-format says.
#
# Runs `clang-format --dry-run -Werror` (no file is changed) and lists the files that
# differ. Fix them with:  clang-format -i <files>   (from the repo root, so the checked-in
# .clang-format applies). Exit 0 when clean, 1 when a file needs formatting, 2 when the
# check cannot run.
set -euo pipefail

repo=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}
cd "$repo" || exit 2

CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
command -v "$CLANG_FORMAT" >/dev/null 2>&1 || {
    echo "format: $CLANG_FORMAT not found (deploy/onsale deps installs it)" >&2
    exit 2
}
[[ -f .clang-format ]] || {
    echo "format: no .clang-format in $repo" >&2
    exit 2
}

files=()
if git -c safe.directory='*' rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    while IFS= read -r -d '' f; do
        [[ -f $f ]] && files+=("$f") # skip tracked files deleted in the work tree
    done < <(git -c safe.directory='*' ls-files -z -- '*.c' '*.h')
else
    # Not a git checkout (an exported tarball): every source outside build trees.
    while IFS= read -r -d '' f; do
        files+=("${f#./}")
    done < <(find . \( -path './build*' -o -path './.onsale' -o -path './.git' \) -prune -o \
        -type f \( -name '*.c' -o -name '*.h' \) -print0 | sort -z)
fi

if ((${#files[@]} == 0)); then
    echo "format: no C sources found"
    exit 0
fi

bad=()
for f in "${files[@]}"; do
    if ! "$CLANG_FORMAT" --dry-run -Werror --style=file "$f" >/dev/null 2>&1; then
        bad+=("$f")
    fi
done

if ((${#bad[@]})); then
    echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format ($("$CLANG_FORMAT" --version | head -n 1)):"
    printf '  %s\n' "${bad[@]}"
    # Show the first differences of the first few files to make the failure actionable.
    for f in "${bad[@]:0:3}"; do
        echo "--- $f"
        "$CLANG_FORMAT" --dry-run -Werror --style=file "$f" 2>&1 | head -n 20 || true
    done
    echo "fix with: clang-format -i ${bad[*]}"
    exit 1
fi
echo "format: ${#files[@]} files clean"
