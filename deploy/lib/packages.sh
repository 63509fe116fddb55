# deploy/lib/packages.sh — packages, build and test.
# Sourced by deploy/onsale (the entry point: its header says what each command does), in
# the order it lists; not a program of its own.
# shellcheck shell=bash
# The parts share their variables (defined in one, used in others): checked one at a time
# they would look unused or unassigned.
# shellcheck disable=SC2034,SC2153

# ---------------------------------------------------------------------------------------
# deps

# missing_packages NAME…: the ones dpkg does not list as installed, one per line.
missing_packages() {
    local p
    for p in "$@"; do
        [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] ||
            printf '%s\n' "$p"
    done
}

# cmd_deps [run]: `deploy/onsale deps` installs everything (running, testing, benchmarks:
# what CI's deps stage wants); `up` asks only for what running the stack needs.
cmd_deps() {
    local missing=() want=("${RUN_PACKAGES[@]}")
    command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: '$PROG deps' needs Debian"
    [[ ${1:-all} == run ]] || want+=("${TEST_PACKAGES[@]}")
    # the cluster topology's load balancer and Postgres failover manager
    [[ $TOPOLOGY != cluster ]] || want+=(haproxy "${PGHA_PACKAGES[@]}")
    mapfile -t missing < <(missing_packages "${want[@]}")
    if ((${#missing[@]} == 0)); then
        say "deps: all ${#want[@]} packages installed"
        return 0
    fi
    local line="apt-get install -y --no-install-recommends ${missing[*]}"
    if ! is_root; then
        printf '%s: missing packages: %s\n  run as root:  apt-get update && %s\n' \
            "$PROG" "${missing[*]}" "$line" >&2
        exit 1
    fi
    say "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q </dev/null || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null ||
        die "apt-get install failed: $line"
}

# ---------------------------------------------------------------------------------------
# build / test

cmd_build() {
    need cmake
    local args=() cache=$BUILD/CMakeCache.txt
    mkdir -p "$BUILD"
    # Two builds into one directory would trample each other: serialise them.
    exec 8>>"$BUILD/.onsale-build.lock"
    flock -w 1800 8 || die "another build holds $BUILD/.onsale-build.lock"
    if [[ -n ${ONSALE_SANITIZE:-} ]]; then
        case $ONSALE_SANITIZE in
        1) args+=(-DONSALE_SANITIZE=ON -DONSALE_TSAN=OFF) ;;
        thread) args+=(-DONSALE_SANITIZE=OFF -DONSALE_TSAN=ON) ;;
        *) args+=(-DONSALE_SANITIZE=OFF -DONSALE_TSAN=OFF) ;;
        esac
    fi
    [[ -z ${ONSALE_BUILD_TYPE:-} ]] || args+=("-DCMAKE_BUILD_TYPE=$ONSALE_BUILD_TYPE")
    local reconf=0 a
    [[ -f $cache ]] || reconf=1
    for a in "${args[@]}"; do
        # -DNAME=VALUE not yet in the cache as NAME:TYPE=VALUE: configure again.
        a=${a#-D}
        grep -q "^${a%%=*}:[A-Z]*=${a#*=}\$" "$cache" 2>/dev/null || reconf=1
    done
    if ((reconf)); then
        say "configuring $BUILD ${args[*]}"
        cmake -S "$ROOT" -B "$BUILD" "${args[@]}" || die "cmake configure failed"
    fi
    say "building $BUILD"
    cmake --build "$BUILD" -j "$(nproc)" || die "build failed"
    exec 8>&-
}

# What only the test suite needs: a headless browser for the browser tests (Debian's
# chromium, NSS tools to trust the dev CA) and playwright-core from the npm registry; the
# OpenAPI tests' YAML and JSON Schema modules (Debian) and Redocly's linter (npm).
# Installs only what is missing; without root or node it says so and the browser test
# skips with that reason.
test_deps() {
    local missing=()
    # TEST_PACKAGES (what `up` leaves out), + pg_auto_failover: the cluster topology's
    # tests run it (deploy/lib/pg_cluster.sh)
    mapfile -t missing < <(missing_packages "${TEST_PACKAGES[@]}" chromium libnss3-tools \
        "${PGHA_PACKAGES[@]}")
    if ((${#missing[@]} > 0)); then
        if is_root; then
            say "test deps: installing ${missing[*]}"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" </dev/null ||
                { apt-get update -q </dev/null && DEBIAN_FRONTEND=noninteractive \
                    apt-get install -y -q "${missing[@]}" </dev/null; } ||
                say "test deps: could not install ${missing[*]}; the tests needing them will skip or fail"
        else
            say "test deps: ${missing[*]} missing (needs root); the tests needing them will skip or fail"
        fi
    fi
    local dir=$ROOT/tests/integration/browser
    if command -v npm >/dev/null 2>&1 && [[ ! -d $dir/node_modules/playwright-core ]]; then
        say "test deps: npm ci in $dir"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error </dev/null) ||
            say "test deps: npm ci failed; the browser test will skip"
    fi
    dir=$ROOT/tests/openapi
    if command -v npm >/dev/null 2>&1 && [[ ! -x $dir/node_modules/.bin/redocly ]]; then
        say "test deps: npm ci in $dir"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error </dev/null) ||
            say "test deps: npm ci failed; the OpenAPI lint test will skip"
    fi
}

cmd_test() {
    cmd_build
    [[ ${ONSALE_SKIP_DEPS:-0} == 1 ]] || test_deps
    need ctest
    if [[ ${ONSALE_SANITIZE:-0} == 1 ]]; then
        export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}
        export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    elif [[ ${ONSALE_SANITIZE:-0} == thread ]]; then
        export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
    fi
    local jobs=${ONSALE_TEST_JOBS:-2}
    say "ctest --test-dir $BUILD --output-on-failure -j$jobs $*"
    exec ctest --test-dir "$BUILD" --output-on-failure -j"$jobs" "$@"
}
