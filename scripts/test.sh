#!/usr/bin/env bash
# The test command: installs what is missing (MariaDB, staticcheck), then runs
# gofmt, go vet, staticcheck and the whole suite against real MariaDB servers
# that the tests start themselves, then the server-using packages once more on
# Oracle MySQL 9.7 (SHARDCTL_TEST_MYSQL=0 leaves that pass out). Usage: scripts/test.sh [go test args...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_go
ensure_mariadb
ensure_staticcheck
mysql_err=""
if [ "${SHARDCTL_TEST_MYSQL:-1}" != 0 ] && ! ensure_mysql; then
  mysql_err="building the MySQL root failed (see above)"
  if [ -z "${CI:-}" ]; then
    log "WARNING: $mysql_err; the MySQL pass is left out (in CI this fails the run)"
    mysql_err=""
    SHARDCTL_TEST_MYSQL=0
  fi
fi

log "gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change: $bad" >&2; exit 1; fi
log "go mod tidy -diff (go.mod and go.sum say exactly what the code imports)"
go mod tidy -diff
log "go vet"
go vet ./...
log "staticcheck"
staticcheck ./...
build
# The end-to-end tests run the binary built above.
export SHARDCTL_BIN="$PWD/bin/shardctl"
out=$(mktemp)
all=$(mktemp)
# run_pass TIMEOUT PACKAGES...: one go test run; its result lines are kept in $all.
run_pass() {
  local limit=$1; shift
  : >"$out"
  set +e
  go test -count=1 -timeout "$limit" "$@" 2>&1 | tee "$out"
  local prc=${PIPESTATUS[0]}
  set -e
  if [ "$prc" -ne 0 ]; then
    retry_failed "$limit" && prc=0
  fi
  cat "$out" >>"$all"
  [ "$prc" -eq 0 ] || rc=$prc
}
# retry_failed TIMEOUT: runs the top-level tests that failed in $out once more,
# each package on its own, and succeeds only if every one passes then. These
# tests drive real servers under a write load on 2 cores, where a rare timing
# (a server that leaves a file behind for a moment, a slow fsync) can fail a
# run; every retried test is named in the output as flaky, so a flaky test is
# seen and fixed, not hidden. A build failure, a panic outside a test or a
# hang (test timed out) is never retried.
retry_failed() {
  local limit=$1
  if grep -qE "^(# |FAIL.*\[build failed\]|FAIL.*\[setup failed\])|test timed out" "$out"; then
    return 1
  fi
  local pkgs
  pkgs=$(grep -E "^FAIL[[:space:]]+github.com/shardctl/shardctl/" "$out" | awk '{print $2}' | sort -u)
  [ -n "$pkgs" ] || return 1
  local ok=0 pkg tests
  for pkg in $pkgs; do
    # the failed top-level tests of this package: "--- FAIL: TestX (..." lines
    # at column 0 that precede the package's FAIL line
    tests=$(awk -v p="$pkg" '/^--- FAIL: /{sub(/^--- FAIL: /,""); sub(/ .*/,""); t[$0]=1} $1=="FAIL" && $2!="" {if ($2==p) for (k in t) print k; delete t} /^ok /{delete t}' "$out" | sort -u | paste -sd'|')
    if [ -z "$tests" ]; then ok=1; continue; fi
    log "retrying once, as flaky candidates: $pkg -run '^($tests)\$'"
    if go test -count=1 -timeout "$limit" -run "^($tests)\$" "$pkg" 2>&1 | tee -a "$out.retry"; then
      echo "FLAKY (failed, then passed on the retry): $pkg $tests"
      # count the package as passed: its FAIL line becomes a retried ok
      sed -i "s#^FAIL[[:space:]]*$pkg[[:space:]].*#ok   $pkg (after retrying $tests)#" "$out"
    else
      ok=1
    fi
  done
  rm -f "$out.retry"
  return $ok
}
rc=0
log "go test (real MariaDB servers; a missing server fails when CI is set)"
SHARDCTL_TEST_FLAVOR=mariadb run_pass 14m "${@:-./...}"
# The second pass: every package that starts servers, on Oracle MySQL 9.7
# (SHARDCTL_TEST_MYSQL=0 skips it; in CI a missing MySQL root is a failure).
if [ "${SHARDCTL_TEST_MYSQL:-1}" != 0 ]; then
  if [ -n "$mysql_err" ]; then
    echo "FAIL mysql-root: $mysql_err" >>"$all"
    rc=1
  else
    log "go test on Oracle MySQL (the packages that start servers)"
    mpkgs=$(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' "${@:-./...}" 2>/dev/null \
      | grep ' github.com/shardctl/shardctl/internal/testenv' | awk '{print $1}' || true)
    if [ -n "$mpkgs" ]; then
      SHARDCTL_TEST_FLAVOR=mysql run_pass 13m $mpkgs
    fi
  fi
fi
passed=$(grep -cE "^ok[[:space:]]" "$all" || true)
failed=$(grep -cE "^FAIL[[:space:]]" "$all" || true)
rm -f "$out" "$all"
# In CI, the benchmark's small mode runs as a smoke test: figures printed, nothing asserted.
if [ "$rc" -eq 0 ] && { [ -n "${CI:-}" ] || [ -n "${SHARDCTL_BENCH_SMOKE:-}" ]; }; then
  # Bounded, and reported rather than counted: the figures are for people, and
  # a benchmark run must never hold CI past its time limit.
  log "benchmark smoke test (scripts/bench.sh --small, at most 10 minutes)"
  if ! timeout --kill-after=30 600 bash scripts/bench.sh --small; then
    echo "benchmark smoke test did not complete (figures above are partial); the tests' result stands" >&2
  fi
fi
# The closing line CI reads (test packages, first run):
echo "packages: $passed passed, $failed failed"
exit "$rc"
