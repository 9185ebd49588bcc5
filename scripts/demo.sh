#!/usr/bin/env bash
# The demo: installs MariaDB when missing, builds shardctl, starts 3 sandbox
# servers, seeds 6 range shards of the book's employees schema, shows the shard
# map and row counts, then moves, splits and merges shards while 'shardctl load'
# writes to them, and checks the load's ledger after each operation. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_go
ensure_mariadb
build

export SHARDCTL_SANDBOX_DIR="${SHARDCTL_SANDBOX_DIR:-${TMPDIR:-/tmp}/shardctl-sandbox}"
export SHARDCTL_PLAN_DIR="${SHARDCTL_PLAN_DIR:-$SHARDCTL_SANDBOX_DIR/plans}"
S="$PWD/bin/shardctl"
BASE=13306
log "starting 3 MariaDB servers"
$S sandbox up --base-port $BASE
export SHARDCTL_CONFIG="$SHARDCTL_SANDBOX_DIR/shardctl.yaml"
log "creating the shard map"
$S shardmap init
log "seeding 6 range shards (employees schema, sharded on emp_no)"
$S sandbox seed --base-port $BASE --shards 6 --employees "${DEMO_EMPLOYEES:-20000}"
log "the shard map"
$S shardmap show
log "shards, sizes and row counts"
$S status --exact

# Runs an operation while the load writes to the moving keys, to keys that
# stay, and to another shard; then checks the ledger.
under_load() {
  local ledger="$SHARDCTL_SANDBOX_DIR/ledger-$1.jsonl"; shift
  local groups=("$1" "$2" "$3"); shift 3
  $S load --rate 300 --ledger "$ledger" --keys "${groups[0]}" --keys "${groups[1]}" --keys "${groups[2]}" \
    >"$ledger.out" 2>"$ledger.err" &
  local pid=$!
  sleep 2
  log "shardctl $*   (while 'shardctl load' writes 300 tx/s)"
  "$S" "$@" --yes
  sleep 1
  kill -TERM $pid; wait $pid || true
  cat "$ledger.out"
  log "ledger check"
  $S load check "$ledger"
}

# Move shard 1 to the other server (to server 3, or back to server 1 on a second run).
to="127.0.0.1:$((BASE + 2))"
if $S shardmap lookup 1 --table employees | grep -q ":$((BASE + 2))/"; then to="127.0.0.1:$BASE"; fi
under_load move "moving=10001-30000" "same-server=3010001-3030000" "other=1010001-1030000" \
  move --shard 1 --to "$to"

# Split shard 2 in two at its median key; the upper half goes to a new shard on server 3.
under_load split "moving=1015000-1030000" "staying=1000001-1010000" "other=4010001-4030000" \
  split --shard 2 --to "127.0.0.1:$((BASE + 2))"
new=$($S shardmap lookup 1025000 --table employees | sed -E 's/.*-> shard ([0-9]+) .*/\1/')

# Merge the new shard back into shard 2.
under_load merge "moving=1015000-1030000" "staying=1000001-1010000" "other=4010001-4030000" \
  merge --shard "$new" --into 2

log "the shard map and row counts after move, split and merge"
$S status --exact
log "plans"
$S plan list

# Tenants: a second fleet on the same servers whose shard map is a LIST
# function (each employee a tenant, one list point per emp_no), in its own
# sharding database. Three tenants move with their rows into an existing
# shard on another server while the load writes to them, to tenants that stay
# and to the receiving shard's own tenants.
export SHARDCTL_SHARDMAP="127.0.0.1:$BASE/tenantmap"
log "a LIST fleet of tenants (shard map tenantmap, schemas tenant_1..3)"
$S shardmap init
$S sandbox seed --base-port $BASE --list --shards 3 --employees "${DEMO_TENANTS:-2000}" --schema-prefix tenant_
t2=$($S shardmap lookup 1000001 --table employees | sed -E 's/.*-> shard ([0-9]+) .*/\1/')
if $S shardmap lookup 301 --table employees | grep -q -- "-> shard 1 "; then
  $S move --shard 1 --keys 301,302,303 --into "$t2" --dry-run
  under_load tenants "moving=301-304" "staying=304-1500" "other=1000201-1001500" \
    move --shard 1 --keys 301,302,303 --into "$t2"
fi
log "tenants and their shards"
$S status --exact
