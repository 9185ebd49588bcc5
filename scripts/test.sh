#!/usr/bin/env bash
# The test command: installs what is missing (MariaDB, staticcheck), then runs
# gofmt, go vet, staticcheck and the whole suite against real MariaDB servers
# that the tests start themselves. Usage: scripts/test.sh [go test args...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_go
ensure_mariadb
ensure_staticcheck

log "gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change: $bad" >&2; exit 1; fi
log "go vet"
go vet ./...
log "staticcheck"
staticcheck ./...
build
log "go test (real MariaDB servers; a missing server fails when CI is set)"
# The end-to-end tests run the binary built above.
export SHARDCTL_BIN="$PWD/bin/shardctl"
go test -count=1 -timeout 14m "${@:-./...}"
