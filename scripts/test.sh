#!/usr/bin/env bash
# The test command: installs what is missing (MariaDB, staticcheck), then runs
# gofmt, go vet, staticcheck and the whole suite against real MariaDB servers
# that the tests start themselves, then the server-using packages once more on
# Oracle MySQL 9.7 (SHARDCTL_TEST_MYSQL=0 leaves that pass out). The e2e tests
# of shardctl's own logic (testenv.FlavorNeutral) run in the MariaDB pass only;
# SHARDCTL_TEST_EVERY_FLAVOR=1 runs them in the MySQL pass too.
# Usage: scripts/test.sh [--unit | --fast] [go test args...]
#   (none)  the full suite, what CI runs
#   --fast  the same without the e2e package (both flavors' servers, no benchmark smoke test)
#   --unit  gofmt and go test -short of every package but e2e: no server,
#           every server test skips with its reason (internal/testenv)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

tier=full
case "${1:-}" in
--unit | --fast) tier=${1#--}; shift ;;
esac
# nonE2E lists every package but the end-to-end tests, which all need servers.
nonE2E() { go list ./... | grep -v '/e2e$'; }

check_gofmt() {
  log "gofmt"
  local bad
  bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
  if [ -n "$bad" ]; then echo "gofmt would change: $bad" >&2; exit 1; fi
}

if [ "$tier" = unit ]; then
  ensure_go
  check_gofmt
  log "go test -short (no server: the server tests skip)"
  out=$(mktemp)
  set +e
  if [ $# -gt 0 ]; then
    go test -short -count=1 "$@" 2>&1 | tee "$out"
  else
    go test -short -count=1 $(nonE2E) 2>&1 | tee "$out"
  fi
  rc=${PIPESTATUS[0]}
  set -e
  echo "packages: $(grep -cE "^ok[[:space:]]" "$out" || true) passed, $(grep -cE "^FAIL[[:space:]]" "$out" || true) failed"
  rm -f "$out"
  exit "$rc"
fi
if [ "$tier" = fast ] && [ $# -eq 0 ]; then
  set -- $(nonE2E)
fi

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

check_gofmt
log "go mod tidy -diff (go.mod and go.sum say exactly what the code imports)"
go mod tidy -diff
log "go vet"
go vet ./...
log "staticcheck"
staticcheck ./...
build
# The end-to-end tests run the binary built above.
export SHARDCTL_BIN="$PWD/bin/shardctl"
# run_pass NAME TIMEOUT PACKAGES...: one go test run, its output in
# $work/NAME.out, its result lines appended to $work/NAME.all and its exit
# status in $work/NAME.rc.
work=$(mktemp -d)
run_pass() {
  local name=$1 limit=$2; shift 2
  local out="$work/$name.out"
  : >"$out"
  set +e
  if [ "$name" = mariadb ]; then # the pass in the foreground prints as it goes
    go test -count=1 -timeout "$limit" "$@" 2>&1 | tee "$out"
  else
    go test -count=1 -timeout "$limit" "$@" >"$out" 2>&1
  fi
  local prc=${PIPESTATUS[0]}
  set -e
  if [ "$prc" -ne 0 ]; then
    retry_failed "$limit" "$out" && prc=0
  fi
  cat "$out" >>"$work/$name.all"
  echo "$prc" >"$work/$name.rc"
}
# retry_failed TIMEOUT OUT: runs the top-level tests that failed in OUT once more,
# each package on its own, and succeeds only if every one passes then. These
# tests drive real servers under a write load on 2 cores, where a rare timing
# (a server that leaves a file behind for a moment, a slow fsync) can fail a
# run; every retried test is named in the output as flaky, so a flaky test is
# seen and fixed, not hidden. A build failure, a panic outside a test or a
# hang (test timed out) is never retried.
retry_failed() {
  local limit=$1 out=$2
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
    echo "retrying once, as flaky candidates: $pkg -run '^($tests)\$'" >>"$out.retry"
    if go test -count=1 -timeout "$limit" -run "^($tests)\$" "$pkg" >>"$out.retry" 2>&1; then
      echo "FLAKY (failed, then passed on the retry): $pkg $tests" >>"$out.retry"
      # count the package as passed: its FAIL line becomes a retried ok
      sed -i "s#^FAIL[[:space:]]*$pkg[[:space:]].*#ok   $pkg (after retrying $tests)#" "$out"
    else
      ok=1
    fi
  done
  cat "$out.retry" >>"$out"
  [ "$out" != "$work/mariadb.out" ] || cat "$out.retry"
  rm -f "$out.retry"
  return $ok
}
rc=0
# The two flavors' passes run side by side, each with its own servers on
# free ports; the MySQL pass's output is printed when both are done, so the
# log reads one pass at a time. Each pass is mostly its e2e package, whose
# tests run one after another; together the two passes keep both cores 82%
# busy (a CI run on a quiet machine, 2026-11-28: 3,207 CPU-s in 1,968 s), and
# splitting each e2e package in two binaries saturated the cores (idle 0.3%)
# and made the run slower: more parallelism here does not shorten the suite. The 35-minute limits are a
# hang guard, not a budget: side by side, an e2e package took 25-27 minutes.
log "go test (real MariaDB servers; a missing server fails when CI is set)"
mysql_pass=""
if [ "${SHARDCTL_TEST_MYSQL:-1}" != 0 ]; then
  if [ -n "$mysql_err" ]; then
    echo "FAIL mysql-root: $mysql_err" >>"$work/mysql.all"
    echo 1 >"$work/mysql.rc"
  else
    # every package that starts servers, on Oracle MySQL 9.7 (in CI a
    # missing MySQL root is a failure)
    mpkgs=$(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' "${@:-./...}" 2>/dev/null \
      | grep ' github.com/shardctl/shardctl/internal/testenv' | awk '{print $1}' || true)
    if [ -n "$mpkgs" ]; then
      # A few flavor-neutral e2e tests run in this pass rather than the
      # MariaDB one, to even out the two (testenv.FlavorNeutralInMySQLPass).
      export SHARDCTL_TEST_PASSES=mariadb,mysql
      SHARDCTL_TEST_FLAVOR=mysql run_pass mysql 35m $mpkgs &
      mysql_pass=$!
      trap 'kill $mysql_pass 2>/dev/null || true' EXIT
    fi
  fi
fi
SHARDCTL_TEST_FLAVOR=mariadb run_pass mariadb 35m "${@:-./...}"
if [ -n "$mysql_pass" ]; then
  wait "$mysql_pass" || true
  trap - EXIT
  log "go test on Oracle MySQL (the packages that start servers; ran beside the MariaDB pass)"
  cat "$work/mysql.out"
fi
for f in "$work"/*.rc; do
  [ "$(cat "$f")" = 0 ] || rc=$(cat "$f")
done
cat "$work"/*.all >"$work/all" 2>/dev/null || : >"$work/all"
passed=$(grep -cE "^ok[[:space:]]" "$work/all" || true)
failed=$(grep -cE "^FAIL[[:space:]]" "$work/all" || true)
rm -rf "$work"
# In CI, the benchmark's small mode runs as a smoke test: figures printed, nothing asserted.
if [ "$tier" = full ] && [ "$rc" -eq 0 ] && { [ -n "${CI:-}" ] || [ -n "${SHARDCTL_BENCH_SMOKE:-}" ]; }; then
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
