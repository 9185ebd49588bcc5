#!/usr/bin/env bash
# The demo: installs MariaDB when missing, builds shardctl, starts 3 sandbox
# servers, seeds 6 range shards of the book's employees schema, and shows the
# shard map and per-shard row counts. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_go
ensure_mariadb
build

export SHARDCTL_SANDBOX_DIR="${SHARDCTL_SANDBOX_DIR:-${TMPDIR:-/tmp}/shardctl-sandbox}"
S="bin/shardctl"
log "starting 3 MariaDB servers"
$S sandbox up
export SHARDCTL_CONFIG="$SHARDCTL_SANDBOX_DIR/shardctl.yaml"
log "creating the shard map"
$S shardmap init
log "seeding 6 range shards (employees schema, sharded on emp_no)"
$S sandbox seed --shards 6 --employees "${DEMO_EMPLOYEES:-5000}"
log "the shard map"
$S shardmap show
log "shards, sizes and row counts"
$S status --exact
log "where does employee 2000042 live?"
$S shardmap lookup 2000042 --table employees
