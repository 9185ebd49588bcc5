#!/usr/bin/env bash
# The benchmarks of the performance issue, side by side with the usual tools,
# on the same data in the same run:
#
#   1. snapshot copy of a 1M-row shard     vs mydumper+myloader and mysqldump | mysql
#   2. binlog catch-up of T s of sysbench   vs T
#   3. write blackout at cutover (10 cutovers under a 4-thread writer) vs gh-ost's 3 s;
#      again with one GTID replica under each server and --max-lag 1s --replica auto;
#      a 3-tenant move out of LIST shards of 300, 10,000 and 100,000 tenants, and a merge of two of 50,000
#   4. prune of 500k rows, chunk 1000      vs pt-archiver --purge (with and without --bulk-delete)
#   5. peak memory of move                  1M vs 5M rows
#   6. copy of 4 tables of mixed types, 1M rows in all  vs mydumper+myloader
#   7. verify (chunked checksums) of a 1M-row shard and its copy  vs pt-table-checksum on one server
#   8. the copy's floor: the copy row's rows loaded from a file by the mariadb client, without and with the k_1 index (info; the copy step against it)
#   9. a split's planning with its foreign-key check on the rows (a child referencing its parent by id, 1M child rows)
#      vs the same planning without the key, and the same join as one statement; a merge's planning (collision scan)
#  10. a fleet of 1,000 small shards on the 3 servers: status, status --exact, rebalance --dry-run, plan list;
#      then rebalance --apply --concurrency 4 of its splits, merges and moves under the ledger load, load check
#  11. scale: planning, move, split and merge of a 1M- and a 10M-row shard of the same Sakila-like shape,
#      per step; the ratio per row (10M/1M divided by 10) against 1.2, with a buffer pool that holds the data
#
# scripts/bench.sh [--small]     (--small: 30x smaller data or less, 2 cutovers, 20 tables beside the blackout row's shard, no pt-archiver row-at-a-time run; about 4 minutes, CI's smoke run)
#
# Environment: BENCH_ONLY=copy,copymixed,floor,verify,memory,catchup,blackout,blackout_replicas,tenants,prune,fkcheck,fleet,scale runs only those;
# TENANT_SIZES (default "300 10000 100000"), TENANT_MOVES (3 moves a size) and TENANT_MERGE (50000; 0: no merge) size the tenants row;
# BENCH_BUFFER_POOL_MB sizes every sandbox server's InnoDB buffer pool (default 256, the tests');
# the scale row restarts the servers with SCALE_POOL_MB (default 3072; 1024 with --small) and back,
# SCALE_REDO_MB resizes their redo log for it (MariaDB), SCALE_OPS="move split merge" picks its commands (SCALE_OPS=plan: planning alone),
# SCALE_ROWS_A and SCALE_ROWS_B its two sizes;
# BENCH_MAX_BLACKOUT=250ms passes --max-blackout to the cutover moves;
# BENCH_CUTOVERS sets their number; BENCH_BLACKOUT_TABLES (default 1000) is how many
# tables another schema holds beside the moving shard on its servers (0: none);
# BENCH_SHARDCTL runs another shardctl binary (an older build, for before/after figures);
# SHARDCTL_BENCH_DIR moves the sandbox, BENCH_PORT_BASE its ports (default 23406);
# BENCH_FLAVOR=mysql runs every row on Oracle MySQL sandbox servers instead of
# MariaDB (the tools, the MariaDB client included, are the same);
# BENCH_SERVER_VERSION=11.8 runs them on MariaDB 11.8 (its root built on first use);
# BENCH_KEEP_SANDBOX=1 leaves it running.
#
# Installs what is missing (Go, MariaDB, sysbench, mydumper, percona-toolkit,
# time, jq), builds bin/shardctl, starts its own 3 sandbox servers on ports
# 23406-23408 in $SHARDCTL_BENCH_DIR (default /tmp/shardctl-bench) and removes
# them at the end. Nothing is asserted: it prints one Markdown table of
# measured figures, ratios and targets, and exits 0 when everything was
# measured (1 when a tool, shardctl included, failed). Logs and JSON of each
# run stay in the work directory it prints. Every command runs under a
# timeout (BENCH_STEP_TIMEOUT seconds, default 300 with --small, 1800
# otherwise) and the whole run under a watchdog (BENCH_TIMEOUT, default 900
# with --small, 7200 otherwise): it never hangs.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
. scripts/lib.sh

SMALL=""
for a in "$@"; do
  case "$a" in
    --small) SMALL=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "usage: scripts/bench.sh [--small]" >&2; exit 2 ;;
  esac
done

if [ -n "$SMALL" ]; then
  COPY_ROWS=30000; CATCHUP_ROWS=20000; CATCHUP_T=2; CUTOVERS=2; EMPLOYEES=2000
  PRUNE_ROWS=20000; MEM_ROWS_A=30000; MEM_ROWS_B=60000; MIXED_ROWS=30000; VERIFY_ROWS=30000; FK_ROWS=30000; FLEET=300; FLEET_SPLIT=2; FLEET_MED=2; FLEET_COLD=2; MODE=small
  SCALE_ROWS_A=${SCALE_ROWS_A:-10000}; SCALE_ROWS_B=${SCALE_ROWS_B:-30000}; SCALE_POOL_MB=${SCALE_POOL_MB:-1024}
  TENANT_SIZES=${TENANT_SIZES:-"300 3000"}; TENANT_MERGE=${TENANT_MERGE:-2000}; TENANT_MOVES=${TENANT_MOVES:-1}
  # CI's smoke run: every row kept working, at the least data that still runs each one
  BLACKOUT_TABLES=${BENCH_BLACKOUT_TABLES:-20}
else
  COPY_ROWS=1000000; CATCHUP_ROWS=200000; CATCHUP_T=30; CUTOVERS=10; EMPLOYEES=5000
  PRUNE_ROWS=500000; MEM_ROWS_A=1000000; MEM_ROWS_B=5000000; MIXED_ROWS=1000000; VERIFY_ROWS=1000000; FK_ROWS=1000000; FLEET=1000; FLEET_SPLIT=4; FLEET_MED=3; FLEET_COLD=4; MODE=full
  SCALE_ROWS_A=${SCALE_ROWS_A:-1000000}; SCALE_ROWS_B=${SCALE_ROWS_B:-10000000}; SCALE_POOL_MB=${SCALE_POOL_MB:-3072}
  TENANT_SIZES=${TENANT_SIZES:-"300 10000 100000"}; TENANT_MERGE=${TENANT_MERGE:-50000}; TENANT_MOVES=${TENANT_MOVES:-3}
fi
STEP_TIMEOUT=${BENCH_STEP_TIMEOUT:-$([ -n "$SMALL" ] && echo 300 || echo 1800)}
RUN_TIMEOUT=${BENCH_TIMEOUT:-$([ -n "$SMALL" ] && echo 900 || echo 7200)}
THREADS=2          # mydumper/myloader threads (shardctl's copy of one table: 1 reader + 3 writers, 2 into MySQL; not a CLI flag)
PRUNE_CHUNK=1000
# Rounds of shardctl prune next to pt-archiver --bulk-delete, alternating:
# this machine's speed drifts by up to 2x within minutes (the same prune took
# 1.4 s and 3.5 s ten minutes apart), so the row reports the median ratio.
PRUNE_ROUNDS=${PRUNE_ROUNDS:-$([ -n "$SMALL" ] && echo 1 || echo 3)}
VERIFY_CHUNK=5000  # verify's default --chunk-rows; pt-table-checksum gets the same fixed --chunk-size
SB_THREADS=4       # sysbench oltp_write_only threads for the catch-up backlog
LOAD_CONC=4        # shardctl load writers per key group during the cutovers (--concurrency is per group)
GHOST_LOCK_MS=3000 # gh-ost's cut-over lock timeout (--cut-over-lock-timeout-seconds=3)
# the fleet's table: the sandbox's employees (sandbox.EmployeesDDL), the one `shardctl load` writes
EMP_DDL="CREATE TABLE employees (emp_no INT NOT NULL PRIMARY KEY, birth_date DATE NOT NULL, first_name VARCHAR(14) NOT NULL, last_name VARCHAR(16) NOT NULL, gender ENUM('M','F') NOT NULL, hire_date DATE NOT NULL) ENGINE=InnoDB"

BASE=${BENCH_PORT_BASE:-23406}
POOL_MB=${BENCH_BUFFER_POOL_MB:-256}
DBUSER=shardctl
DBPASS=sandbox-secret-pw # the sandbox's own account (sandbox only)
FLAVOR=${BENCH_FLAVOR:-mariadb}
case "$FLAVOR" in
  mariadb) PIDFILE=mariadbd.pid ;;
  mysql) PIDFILE=mysqld.pid ;;
  *) echo "bench: BENCH_FLAVOR is mariadb or mysql, not $FLAVOR" >&2; exit 2 ;;
esac
VERSION=${BENCH_SERVER_VERSION:-}
case "$FLAVOR/$VERSION" in
  */) ;;
  mariadb/11.8) ;;
  *) echo "bench: BENCH_SERVER_VERSION is 11.8 (MariaDB) or empty, not $VERSION" >&2; exit 2 ;;
esac
DIR="${SHARDCTL_BENCH_DIR:-${TMPDIR:-/tmp}/shardctl-bench}"
CONF="$DIR/shardctl.yaml"
START=$(date +%s)

ensure_go
ensure_mariadb # the client, and the servers of the default flavor
[ "$FLAVOR" = mariadb ] || ensure_mysql
[ -z "$VERSION" ] || ensure_root "mariadb-$VERSION"
ensure_bench_tools
[ -x /usr/bin/time ] || { log "installing time (for /usr/bin/time -v)"; apt_install time; }
command -v jq >/dev/null 2>&1 || { log "installing jq"; apt_install jq; }
build
S="${BENCH_SHARDCTL:-$PWD/bin/shardctl}"
CUTOVERS=${BENCH_CUTOVERS:-$CUTOVERS}
BLACKOUT_TABLES=${BLACKOUT_TABLES:-${BENCH_BLACKOUT_TABLES:-1000}}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/shardctl-bench-work.XXXXXX")
RES="$WORK/results"
: >"$RES"

# ---------------------------------------------------------------- helpers

port() { echo $((BASE + $1 - 1)); }
addr() { echo "127.0.0.1:$(port "$1")"; }
# T CMD...: CMD under the step timeout (SIGTERM, then SIGKILL 10 s later)
T() { timeout -k 10 "$STEP_TIMEOUT" "$@"; }
M() { local p; p=$(port "$1"); shift; T mariadb --no-defaults -h127.0.0.1 -P"$p" -u"$DBUSER" -p"$DBPASS" "$@"; }
now() { date +%s.%N; }
# f EXPR: awk arithmetic, printed with 2 decimals; div A B: A / B ("n/a" when B is 0)
f() { awk "BEGIN { printf \"%.2f\", ($1) }" 2>/dev/null || echo n/a; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0 || a == "" || a == "n/a") print "n/a"; else printf "%.2f", a / b }'; }
# median "A, B, ...": the median of a list of numbers (the mean of the middle two of an even count)
median() { echo "$1" | tr ',' '\n' | awk 'NF { print $1 + 0 }' | sort -g | awk '{ v[++n] = $1 } END { if (n == 0) { print "n/a"; exit } printf "%.2f", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'; }
# put KEY VALUE / get KEY: results shared between the measurement subshells
put() { printf '%s=%s\n' "$1" "$2" >>"$RES"; }
get() { sed -n "s/^$1=//p" "$RES" | tail -n 1; }
progress() { log "[$(($(date +%s) - START))s] $*"; }
# fail MESSAGE [FILE]: say why and show the end of FILE, then stop this measurement
fail() {
  echo "bench: $1" >&2
  if [ -n "${2:-}" ] && [ -s "$2" ]; then tail -n 15 "$2" | sed 's/^/    /' >&2; fi
  return 1
}
# use_map NAME: the shard-map schema and plan directory of one measurement
use_map() {
  MAP="127.0.0.1:$BASE/$1"
  PLANS="$WORK/plans-$1"
  SC=("$S" --config "$CONF" --shardmap "$MAP" --plan-dir "$PLANS")
}
# sc OUT ARGS...: run shardctl with -o json, stdout to OUT, stderr to OUT.err
sc() {
  local out=$1 rc=0; shift
  T "${SC[@]}" "$@" -o json >"$out" 2>"$out.err" || rc=$?
  [ $rc -eq 0 ] || fail "shardctl $* exited $rc" "$out.err" || return $rc
}
# sb_map: a shard map with the RANGE function "sb" on sbtest1.id
sb_map() {
  sc "$WORK/map-$1.json" shardmap init
  sc "$WORK/map-$1.json" shardmap add-function sb --type RANGE
  sc "$WORK/map-$1.json" shardmap add-column sbtest1 id --function sb
}
# add_shard SERVER SCHEMA: creates the schema (add-shard registers an existing
# one) and prints the new shard id
add_shard() {
  M "$1" -e "CREATE DATABASE IF NOT EXISTS \`$2\`"
  sc "$WORK/shard-$2.json" shardmap add-shard --server "$(addr "$1")" --schema "$2"
  jq -r .shard_id "$WORK/shard-$2.json"
}
add_range() { sc "$WORK/range.json" shardmap add-range --function sb --lower "$1" --shard "$2"; }
sysbench_args() { # SERVER SCHEMA ROWS
  echo --mysql-host=127.0.0.1 --mysql-port="$(port "$1")" --mysql-user="$DBUSER" --mysql-password="$DBPASS" \
    --mysql-db="$2" --tables=1 --table-size="$3"
}
prepare() { # SERVER SCHEMA ROWS
  M "$1" -e "CREATE DATABASE IF NOT EXISTS \`$2\`"
  # shellcheck disable=SC2046
  T sysbench oltp_read_write $(sysbench_args "$@") prepare >"$WORK/prepare-$2.log" 2>&1 ||
    fail "sysbench prepare of $3 rows into $2 failed" "$WORK/prepare-$2.log"
}
count() { M "$1" -N -e "SELECT COUNT(*) FROM \`$2\`.sbtest1"; }
# settle SERVER: wait (at most 30 s) for InnoDB's purge of earlier deletes,
# then (at most 60 s) for its dirty pages to be written, so neither the purge
# nor the flushing of what came before (a sysbench prepare: ~250 MB) runs
# during, and is billed to, the next measurement; every timed run starts so
settle() {
  local i h pct lwm
  for i in $(seq 60); do
    h=$(M "$1" -e "SHOW ENGINE INNODB STATUS\G" | sed -n 's/.*History list length \([0-9]*\).*/\1/p')
    [ "${h:-0}" -lt 2000 ] && break
    sleep 0.5
  done
  read -r pct lwm < <(M "$1" -N -e "SELECT @@innodb_max_dirty_pages_pct, @@innodb_max_dirty_pages_pct_lwm")
  M "$1" -e "SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0.001, innodb_max_dirty_pages_pct = 0.001"
  for i in $(seq 300); do
    [ "$(M "$1" -N -e "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'" | cut -f2)" -lt 100 ] && break
    sleep 0.2
  done
  M "$1" -e "SET GLOBAL innodb_max_dirty_pages_pct = $pct, innodb_max_dirty_pages_pct_lwm = $lwm"
}
# cpu_mark NAME / cpu_report NAME: machine CPU use and each server's CPU seconds in between
CLK=$(getconf CLK_TCK)
mariadbd_ticks() {
  local i pid
  for i in 1 2 3; do
    pid=$(cat "$DIR/s$i/$PIDFILE" 2>/dev/null || true)
    if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then awk '{ printf "%d ", $14 + $15 }' "/proc/$pid/stat"; else printf '0 '; fi
  done
}
cpu_mark() { { head -n 1 /proc/stat; mariadbd_ticks; echo; } >"$WORK/cpu-$1"; }
# srv_cpu NAME: CPU seconds of the three servers together since cpu_mark NAME
srv_cpu() {
  awk -v a="$(tail -n 1 "$WORK/cpu-$1")" -v b="$(mariadbd_ticks)" -v clk="$CLK" 'BEGIN {
    split(a, x, " "); split(b, y, " "); printf "%.2f", (y[1] + y[2] + y[3] - x[1] - x[2] - x[3]) / clk }'
}
cpu_report() {
  local a b
  a=$(cat "$WORK/cpu-$1" | tr '\n' ' ')
  b="$(head -n 1 /proc/stat) $(mariadbd_ticks)"
  awk -v a="$a" -v b="$b" -v clk="$CLK" -v n="$(nproc)" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    # cpu user nice system idle iowait irq softirq steal ... then 3 mariadbd tick counts
    tot = 0; for (i = 2; i <= 11; i++) tot += y[i] - x[i]
    idle = (y[5] - x[5]); wa = (y[6] - x[6])
    printf "machine CPU %.0f%% busy, %.0f%% iowait of %d cores over %.1f s; mariadbd CPU s1 %.1f s, s2 %.1f s, s3 %.1f s",
      100 * (tot - idle - wa) / tot, 100 * wa / tot, n, tot / clk / n,
      (y[12] - x[12]) / clk, (y[13] - x[13]) / clk, (y[14] - x[14]) / clk }'
}
rss_mb() { awk '/Maximum resident set size/ { printf "%.1f", $NF / 1024 }' "$1"; }
cpu_s() { awk '/User time|System time/ { s += $NF } END { printf "%.2f", s }' "$1"; }
# top_later SECONDS FILE: one 'top -b -n1' snapshot in the background, SECONDS from now
# (the second of two frames one second apart: the first one's %CPU is not over a short interval)
top_later() { (sleep "$1"; top -b -n2 -d1 -w 160 2>/dev/null | awk '/^top - / { n++ } n == 2' | head -n 16 >"$2") & }

# bounded_wait PID SECONDS: wait for a background job, killing it when it outlives SECONDS
bounded_wait() {
  local i
  for i in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1"
}

. scripts/bench_peer.sh

LOAD_PID_FILE="$WORK/load.pid"
WATCHDOG=""
cleanup() {
  local rc=$?
  [ -z "$WATCHDOG" ] || kill "$WATCHDOG" 2>/dev/null || true
  if [ -s "$LOAD_PID_FILE" ]; then kill -TERM "$(cat "$LOAD_PID_FILE")" 2>/dev/null || true; fi
  if [ -z "${BENCH_KEEP_SANDBOX:-}" ]; then
    extra_down_all
    "$S" sandbox down --sandbox-dir "$DIR" --base-port "$BASE" --servers 3 --purge >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK/dump"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

FAILED=()
# run_measure NAME FUNCTION: a failing measurement is reported and the others still run
run_measure() {
  local name=$1 rc=0; shift
  if [ -n "${BENCH_ONLY:-}" ] && [[ ",$BENCH_ONLY," != *",$name,"* ]]; then
    put "failed_$name" "not run (BENCH_ONLY=$BENCH_ONLY)"
    return 0
  fi
  progress "$name (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  set +e
  (set -e; "$@")
  rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    FAILED+=("$name")
    put "failed_$name" "exit $rc"
    log "$name: FAILED (exit $rc), see $WORK"
  fi
}

# timed_move NAME SHARD ROWS: `move --no-verify --keep-source` of SHARD (ROWS
# rows) to server 2, timed, with the CPU of the servers and of shardctl: puts
# NAME_move_s, NAME_srv_cpu_s, NAME_shardctl_cpu_s, NAME_cpu, NAME_steps...
timed_move() {
  local name=$1 id=$2 t0 t1 rows
  settle 1
  settle 2
  cpu_mark "$name"
  t0=$(now)
  /usr/bin/time -v -o "$WORK/$name.time" timeout -k 10 "$STEP_TIMEOUT" "${SC[@]}" move --shard "$id" --to "$(addr 2)" --yes -o json --no-verify --keep-source \
    >"$WORK/$name.json" 2>"$WORK/$name.json.err" || fail "shardctl move exited $?" "$WORK/$name.json.err"
  t1=$(now)
  wait # for top_later
  put "${name}_srv_cpu_s" "$(srv_cpu "$name")"
  put "${name}_cpu" "$(cpu_report "$name")"
  put "${name}_shardctl_cpu_s" "$(cpu_s "$WORK/$name.time")"
  rows=$(jq -r .result.rows_copied "$WORK/$name.json")
  [ "$rows" = "$3" ] || fail "shardctl copied $rows rows, not $3"
  put "${name}_move_s" "$(f "$t1 - $t0")"
  put "${name}_step_s" "$(f "$(jq -r '.result.step_seconds.copy' "$WORK/$name.json")")"
  put "${name}_create_copy_s" "$(f "$(jq -r '.result.step_seconds.create + .result.step_seconds.copy' "$WORK/$name.json")")"
  put "${name}_steps" "$(jq -c '.result.step_seconds | with_entries(.value |= (. * 100 | round / 100))' "$WORK/$name.json")"
  put "${name}_rss_mb" "$(rss_mb "$WORK/$name.time")"
  progress "$name: shardctl $(get "${name}_move_s") s end to end, copy step $(get "${name}_step_s") s; $(get "${name}_cpu")"
}

# mydumper_ref NAME SCHEMA DEST ROWS [TABLE]: the reference copy, mydumper -t
# THREADS of SCHEMA (or only its TABLE) on server 1 + myloader -t THREADS into
# DEST on server 3 (binlog on, like shardctl's writes), timed, with the CPU of
# the servers and of both tools: puts NAME_s, NAME_dump_s, NAME_load_s,
# NAME_srv_cpu_s, NAME_client_cpu_s, NAME_cpu. DEST stays for the caller to
# check and drop. The source copy is fenced (triggers): the dump leaves them out.
mydumper_ref() {
  local name=$1 schema=$2 dest=$3 rows=$4 try t0 t1 dump only=()
  [ -z "${5:-}" ] || only=(-T "$5")
  progress "$name: mydumper -t $THREADS + myloader -t $THREADS (server 1 -> 3, binlog on)"
  # myloader -t 2 sometimes dies on a deadlock between its own threads
  # (seen: "Error restoring … Deadlock found"): the whole reference run is
  # measured again once, from scratch, before it counts as failed.
  for try in 1 2; do
    settle 1
    settle 3
    rm -rf "$WORK/dump"
    M 3 -e "DROP DATABASE IF EXISTS \`$dest\`"
    cpu_mark "$name"
    t0=$(now)
    /usr/bin/time -v -o "$WORK/$name-dump.time" timeout -k 10 "$STEP_TIMEOUT" mydumper -h 127.0.0.1 -P "$(port 1)" -u "$DBUSER" -p "$DBPASS" -B "$schema" "${only[@]}" -t "$THREADS" \
      -r $((rows / 10)) --trx-consistency-only -o "$WORK/dump" -v 1 >"$WORK/$name-dump.log" 2>&1 ||
      fail "mydumper failed" "$WORK/$name-dump.log"
    dump=$(now)
    /usr/bin/time -v -o "$WORK/$name-load.time" timeout -k 10 "$STEP_TIMEOUT" myloader -h 127.0.0.1 -P "$(port 3)" -u "$DBUSER" -p "$DBPASS" -d "$WORK/dump" -s "$schema" -B "$dest" \
      -t "$THREADS" -e -v 1 >"$WORK/$name-load.log" 2>&1 && break
    if [ "$try" = 2 ] || ! grep -q "Deadlock" "$WORK/$name-load.log"; then
      fail "myloader failed" "$WORK/$name-load.log"
    fi
    progress "$name: myloader died on a deadlock between its own threads; measuring mydumper + myloader once more"
  done
  t1=$(now)
  put "${name}_srv_cpu_s" "$(srv_cpu "$name")"
  put "${name}_cpu" "$(cpu_report "$name")"
  put "${name}_client_cpu_s" "$(f "$(cpu_s "$WORK/$name-dump.time") + $(cpu_s "$WORK/$name-load.time")")"
  put "${name}_s" "$(f "$t1 - $t0")"
  put "${name}_dump_s" "$(f "$dump - $t0")"
  put "${name}_load_s" "$(f "$t1 - $dump")"
  rm -rf "$WORK/dump"
  progress "$name: mydumper $(get "${name}_dump_s") s + myloader $(get "${name}_load_s") s = $(get "${name}_s") s"
}

# ---------------------------------------------------------------- 1. copy

measure_copy() {
  local id t0 t1
  use_map bench_copy
  sb_map copy
  id=$(add_shard 1 sbcopy)
  add_range 0 "$id"
  progress "copy: sysbench prepare $COPY_ROWS rows on server 1"
  prepare 1 sbcopy "$COPY_ROWS"
  settle 1

  progress "copy: shardctl move --no-verify --keep-source (server 1 -> 2)"
  top_later "$([ -n "$SMALL" ] && echo 0 || echo 5)" "$WORK/copy-top.txt"
  timed_move copy "$id" "$COPY_ROWS"
  [ "$(count 2 sbcopy)" = "$COPY_ROWS" ] || fail "target row count differs"

  # The source copy is fenced (triggers): the dumps leave triggers out.
  progress "copy: mysqldump --single-transaction | mysql (server 1 -> 3)"
  settle 1
  M 3 -e "DROP DATABASE IF EXISTS ref_dump; CREATE DATABASE ref_dump"
  cpu_mark dump
  t0=$(now)
  T mysqldump --no-defaults -h127.0.0.1 -P"$(port 1)" -u"$DBUSER" -p"$DBPASS" --single-transaction --skip-triggers sbcopy sbtest1 2>"$WORK/mysqldump.err" |
    M 3 ref_dump 2>"$WORK/mysql.err" || fail "mysqldump | mysql failed" "$WORK/mysqldump.err"
  t1=$(now)
  put dump_cpu "$(cpu_report dump)"
  [ "$(count 3 ref_dump)" = "$COPY_ROWS" ] || fail "mysqldump | mysql: row count differs"
  put dump_s "$(f "$t1 - $t0")"
  M 3 -e "DROP DATABASE ref_dump"
  progress "copy: mysqldump | mysql $(get dump_s) s"

  mydumper_ref mydumper sbcopy ref_myd "$COPY_ROWS" sbtest1
  [ "$(count 3 ref_myd)" = "$COPY_ROWS" ] || fail "mydumper/myloader: row count differs"
  M 3 -e "DROP DATABASE ref_myd"
  # Free both servers for the next measurements.
  M 1 -e "DROP DATABASE sbcopy"
  M 2 -e "DROP DATABASE sbcopy"
}

# ---------------------------------------------------------------- 8. the copy's floor

# measure_floor: what loading one sysbench table costs the target server by
# itself, without shardctl or a source in the way: the copy row's rows, dumped
# to a file, loaded with the mariadb client's LOAD DATA LOCAL (what shardctl's
# writers send) into an empty table on server 3 (binlog on). The rows alone
# (no secondary index): one session, then two at once on the file's halves;
# with the table's AUTO_INCREMENT and without it. Then the end state the copy
# produces, sysbench's k_1 index included, two ways: the one-session table
# of rows given its k_1 by the server's own ALTER TABLE … ADD KEY (what
# shardctl does after the rows), and a fresh table created with k_1 loaded in
# one session (the index kept up row by row).
# MariaDB latches the primary key's root page for every row written to a table
# with AUTO_INCREMENT (the persistent counter, MDEV-6076): two sessions into
# such a table mostly wait for each other, which is why shardctl's writers
# take turns there (snapshot.hasAutoInc).
measure_floor() {
  local ai tag n t0 t1
  prepare 1 sbfloor "$COPY_ROWS"
  M 1 -N --quick -e "SELECT * FROM sbfloor.sbtest1" >"$WORK/floor.tsv"
  split -n l/2 -d "$WORK/floor.tsv" "$WORK/floor-half."
  M 1 -e "DROP DATABASE sbfloor"
  for ai in AUTO_INCREMENT ""; do
    tag=ai; [ -n "$ai" ] || tag=plain
    for n in 1 2; do
      floor_table "$ai" ""
      cpu_mark "floor_$tag$n"
      t0=$(now)
      if [ "$n" = 1 ]; then
        floor_load "$WORK/floor.tsv"
      else
        floor_load "$WORK/floor-half.00" &
        floor_load "$WORK/floor-half.01"
        wait $! || fail "LOAD DATA failed"
      fi
      t1=$(now)
      [ "$(count 3 floor)" = "$COPY_ROWS" ] || fail "LOAD DATA loaded $(count 3 floor) rows, not $COPY_ROWS"
      put "floor_$tag${n}_s" "$(f "$t1 - $t0")"
      put "floor_$tag${n}_cpu_s" "$(srv_cpu "floor_$tag$n")"
      progress "floor: $n session(s), ${ai:-no AUTO_INCREMENT}: $(get "floor_$tag${n}_s") s, servers $(get "floor_$tag${n}_cpu_s") CPU-s"
      [ "$tag$n" = ai1 ] || continue
      # The copy's end state: the same table given its secondary index afterwards.
      settle 3
      cpu_mark floor_alter
      t0=$(now)
      M 3 -e "ALTER TABLE floor.sbtest1 ADD KEY k_1 (k)" || fail "ALTER TABLE … ADD KEY failed"
      t1=$(now)
      put floor_alter_s "$(f "$t1 - $t0")"
      put floor_alter_cpu_s "$(srv_cpu floor_alter)"
      put floor_idx_alter_s "$(f "$(get floor_ai1_s) + $(get floor_alter_s)")"
      put floor_idx_alter_cpu_s "$(f "$(get floor_ai1_cpu_s) + $(get floor_alter_cpu_s)")"
      progress "floor: ADD KEY k_1 after the rows: $(get floor_alter_s) s, servers $(get floor_alter_cpu_s) CPU-s"
    done
  done
  # The same end state with the index there from the start.
  floor_table AUTO_INCREMENT ", KEY k_1 (k)"
  cpu_mark floor_keyed
  t0=$(now)
  floor_load "$WORK/floor.tsv"
  t1=$(now)
  [ "$(count 3 floor)" = "$COPY_ROWS" ] || fail "LOAD DATA loaded $(count 3 floor) rows, not $COPY_ROWS"
  put floor_idx_keyed_s "$(f "$t1 - $t0")"
  put floor_idx_keyed_cpu_s "$(srv_cpu floor_keyed)"
  progress "floor: 1 session into a table created with k_1: $(get floor_idx_keyed_s) s, servers $(get floor_idx_keyed_cpu_s) CPU-s"
  # The floor of the copy's end state is the faster of the two ways.
  if awk -v a="$(get floor_idx_alter_s)" -v b="$(get floor_idx_keyed_s)" 'BEGIN { exit !(a <= b) }'; then
    put floor_idx_s "$(get floor_idx_alter_s)"; put floor_idx_how "rows, then ADD KEY"
  else
    put floor_idx_s "$(get floor_idx_keyed_s)"; put floor_idx_how "table created with the key"
  fi
  M 3 -e "DROP DATABASE floor"
  rm -f "$WORK/floor.tsv" "$WORK/floor-half."*
}

# floor_table AUTO_INCREMENT|"" EXTRA: a fresh, empty floor.sbtest1 on server 3
# (EXTRA: more elements, e.g. a KEY), settled
floor_table() {
  M 3 -e "DROP DATABASE IF EXISTS floor; CREATE DATABASE floor; CREATE TABLE floor.sbtest1 (id INT NOT NULL $1,
    k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id)$2) ENGINE=InnoDB"
  settle 3
}

# floor_load FILE: LOAD DATA LOCAL of FILE into floor.sbtest1 on server 3, one session
floor_load() {
  M 3 --local-infile=1 -e "LOAD DATA LOCAL INFILE '$1' INTO TABLE floor.sbtest1 CHARACTER SET binary" || fail "LOAD DATA failed"
}

# ---------------------------------------------------------------- 6. copy of mixed types

# mixed_schema / mixed_data ROWS: 4 tables not shaped like sysbench's, ROWS
# rows in all, generated on the server by MariaDB's sequence engine (seq_1_to_N):
# a composite primary key with 3 secondary indexes; the usual scalar types
# (signed and unsigned BIGINT, DECIMAL, DATETIME(6), ENUM, nullable and empty
# VARCHAR, DOUBLE, DATE); TEXT, JSON and binary BLOB of about 600 bytes a row
# (tabs, newlines, backslashes, quotes, NUL bytes, 4-byte UTF-8); and a narrow
# AUTO_INCREMENT table with most of the rows.
mixed_schema() {
  cat <<'SQL'
CREATE TABLE orders (
  customer_id INT UNSIGNED NOT NULL, order_no INT UNSIGNED NOT NULL, sku VARCHAR(32) NOT NULL,
  status TINYINT NOT NULL, total DECIMAL(12,2) NOT NULL, created_at DATETIME NOT NULL,
  note VARCHAR(64) CHARACTER SET utf8mb4 NULL,
  PRIMARY KEY (customer_id, order_no), KEY created (created_at), KEY status_total (status, total), KEY sku (sku)
) ENGINE=InnoDB;
CREATE TABLE typed (
  id BIGINT NOT NULL PRIMARY KEY, big BIGINT NOT NULL, ubig BIGINT UNSIGNED NOT NULL, amount DECIMAL(18,6) NOT NULL,
  at DATETIME(6) NOT NULL, kind ENUM('new','paid','shipped','returned') NOT NULL,
  label VARCHAR(100) CHARACTER SET utf8mb4 NULL, ratio DOUBLE NULL, day DATE NOT NULL
) ENGINE=InnoDB;
CREATE TABLE docs (
  id INT UNSIGNED NOT NULL PRIMARY KEY, body TEXT CHARACTER SET utf8mb4 NOT NULL, meta JSON NOT NULL, payload BLOB NOT NULL
) ENGINE=InnoDB;
CREATE TABLE events (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, ts TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  kind TINYINT UNSIGNED NOT NULL, val INT NOT NULL
) ENGINE=InnoDB;
SQL
}
MIXED_TABLES=(orders typed docs events)
mixed_data() {
  local n=$1
  cat <<SQL
SET NAMES utf8mb4;
INSERT INTO orders SELECT seq DIV 8 + 1, seq MOD 8 + 1, CONCAT('SKU-', LPAD(seq * 7919 MOD 100000, 6, '0')), seq MOD 5,
  (seq * 37 MOD 1000000) / 100, TIMESTAMP'2020-01-01 00:00:00' + INTERVAL (seq * 13 MOD 50000000) SECOND,
  IF(seq MOD 7 = 0, NULL, CONCAT('note ', seq, ' für Ø'))
  FROM seq_0_to_$((n / 4 - 1));
INSERT INTO typed SELECT seq, CAST(seq AS SIGNED) * 1000003 - 500000000000, 18446744073709551615 - seq * 3, seq * 1000001 / 7000000,
  TIMESTAMP'2021-06-01 00:00:00.000000' + INTERVAL seq * 1234567 MICROSECOND, ELT(seq MOD 4 + 1, 'new', 'paid', 'shipped', 'returned'),
  CASE WHEN seq MOD 5 = 0 THEN NULL WHEN seq MOD 11 = 0 THEN '' ELSE CONCAT('label ', seq, ' tab\there "q" \'s \\\\ 😀') END,
  IF(seq MOD 13 = 0, NULL, seq / 3e0), DATE'2000-01-01' + INTERVAL seq MOD 9000 DAY
  FROM seq_1_to_$((n / 5));
INSERT INTO docs SELECT seq, CONCAT('doc ', seq, ' ', REPEAT(SUBSTRING(SHA2(CAST(seq AS CHAR), 256), 1, 32), 8), '\n\tline two \\\\ é 😀'),
  JSON_OBJECT('id', seq, 'tags', JSON_ARRAY('a', 'b', seq MOD 17), 'name', CONCAT('n', SUBSTRING(SHA2(CAST(seq AS CHAR), 256), 1, 32)), 'nested', JSON_OBJECT('x', seq * 0.5, 'ok', seq MOD 2 = 0)),
  CONCAT(UNHEX(SHA2(CAST(seq AS CHAR), 512)), UNHEX(SHA2(CAST(seq + 1 AS CHAR), 512)), UNHEX(SHA2(CAST(seq + 2 AS CHAR), 512)), X'00090A0D5C27221A')
  FROM seq_1_to_$((n / 10));
INSERT INTO events (ts, kind, val) SELECT FROM_UNIXTIME(1600000000 + seq * 7), seq MOD 250, CAST(seq * 31 MOD 1000003 AS SIGNED) - 500000
  FROM seq_1_to_$((n - n / 4 - n / 5 - n / 10));
SQL
}
# seq_sql: SQL on stdin with MariaDB's sequence tables (seq_A_to_B) made
# portable: on MySQL each becomes a recursive CTE of the same rows
seq_sql() {
  if [ "$FLAVOR" = mariadb ]; then cat; return; fi
  echo "SET SESSION cte_max_recursion_depth = 100000000;"
  sed -E 's/seq_([0-9]+)_to_([0-9]+)/(WITH RECURSIVE s(seq) AS (SELECT CAST(\1 AS UNSIGNED) UNION ALL SELECT seq + 1 FROM s WHERE seq < \2) SELECT seq FROM s) AS q/g'
}
# mixed_sums SERVER SCHEMA: each table's row count and CHECKSUM TABLE, on one line
mixed_sums() {
  local t n c out=""
  for t in "${MIXED_TABLES[@]}"; do
    n=$(M "$1" -N -e "SELECT COUNT(*) FROM \`$2\`.\`$t\`")
    c=$(M "$1" -N -e "CHECKSUM TABLE \`$2\`.\`$t\`" | cut -f2)
    out+="${out:+, }$t $n rows (checksum $c)"
  done
  echo "$out"
}

measure_copymixed() {
  local id t a b
  use_map bench_mixed
  sc "$WORK/map-mixed.json" shardmap init
  sc "$WORK/map-mixed.json" shardmap add-function mx --type RANGE
  # sharded on the first primary-key column; one range gives the shard every row
  for t in orders:customer_id typed:id docs:id events:id; do sc "$WORK/map-mixed.json" shardmap add-column "${t%%:*}" "${t#*:}" --function mx; done
  id=$(add_shard 1 mixed)
  sc "$WORK/range.json" shardmap add-range --function mx --lower 0 --shard "$id"
  progress "copymixed: $MIXED_ROWS rows in 4 tables of mixed types on server 1 (sequence engine)"
  mixed_schema | M 1 mixed
  mixed_data "$MIXED_ROWS" | seq_sql | M 1 mixed
  settle 1
  a=$(mixed_sums 1 mixed)

  progress "copymixed: shardctl move --no-verify --keep-source (server 1 -> 2)"
  timed_move mixed "$id" "$MIXED_ROWS"
  b=$(mixed_sums 2 mixed)
  [ "$b" = "$a" ] || fail "shardctl's copy differs from the source: rows and CHECKSUM TABLE $b, source $a"

  settle 1
  mydumper_ref mixmyd mixed ref_mixed "$MIXED_ROWS"
  b=$(mixed_sums 3 ref_mixed)
  # shardctl's copy must be exact (above); a reference's wrong copy is a
  # finding, reported next to its time (seen: mydumper 0.10 on MySQL 8+
  # takes a DEFAULT CURRENT_TIMESTAMP column, EXTRA "DEFAULT_GENERATED", for
  # a generated one and leaves its values out)
  [ "$b" = "$a" ] || put mixmyd_differs "$b"
  put mixed_sums "$a"
  M 3 -e "DROP DATABASE ref_mixed"
  M 1 -e "DROP DATABASE mixed"
  M 2 -e "DROP DATABASE mixed"
}

# ---------------------------------------------------------------- 7. verify

measure_verify() {
  local id t0 t1 line
  use_map bench_verify
  sb_map verify
  id=$(add_shard 1 sbverify)
  add_range 0 "$id"
  progress "verify: sysbench prepare $VERIFY_ROWS rows on server 1, shardctl move --keep-source to server 2 (the copy to verify)"
  prepare 1 sbverify "$VERIFY_ROWS"
  sc "$WORK/verify-move.json" move --shard "$id" --to "$(addr 2)" --yes --no-verify --keep-source
  settle 1
  settle 2

  # The shard is now on server 2; its source copy stays (fenced) on server 1.
  progress "verify: shardctl verify --shard $id --against server 1 (chunks of $VERIFY_CHUNK rows)"
  cpu_mark verify
  t0=$(now)
  /usr/bin/time -v -o "$WORK/verify.time" timeout -k 10 "$STEP_TIMEOUT" "${SC[@]}" verify --shard "$id" --against "$(addr 1)" --chunk-rows "$VERIFY_CHUNK" -o json \
    >"$WORK/verify.json" 2>"$WORK/verify.json.err" || fail "shardctl verify exited $?" "$WORK/verify.json.err"
  t1=$(now)
  put verify_srv_cpu_s "$(srv_cpu verify)"
  put verify_cpu "$(cpu_report verify)"
  put verify_shardctl_cpu_s "$(cpu_s "$WORK/verify.time")"
  put verify_s "$(f "$t1 - $t0")"
  [ "$(jq -r .rows "$WORK/verify.json")" = "$VERIFY_ROWS" ] || fail "shardctl verify compared $(jq -r .rows "$WORK/verify.json") rows, not $VERIFY_ROWS" "$WORK/verify.json"
  put verify_chunks "$(jq -r .chunks "$WORK/verify.json")"
  progress "verify: shardctl $(get verify_s) s, $(get verify_chunks) chunks; $(get verify_cpu)"

  # pt-table-checksum on one server (no replicas: --recursion-method=none):
  # the checksum of each chunk is computed once, on the source, and stored.
  progress "verify: pt-table-checksum --chunk-size $VERIFY_CHUNK --chunk-time 0 on server 1"
  # Fresh statistics, or pt-table-checksum may take a new table for an empty
  # one and checksum it in a single chunk (seen on MySQL).
  M 1 -e "ANALYZE TABLE sbverify.sbtest1" >/dev/null
  settle 1
  cpu_mark ptc
  t0=$(now)
  /usr/bin/time -v -o "$WORK/ptc.time" timeout -k 10 "$STEP_TIMEOUT" pt-table-checksum "h=127.0.0.1,P=$(port 1),u=$DBUSER,p=$DBPASS" \
    --databases sbverify --tables sbtest1 --recursion-method=none --no-check-binlog-format --replicate ref_ptc.checksums \
    --chunk-size "$VERIFY_CHUNK" --chunk-time 0 >"$WORK/ptc.log" 2>&1 || fail "pt-table-checksum exited $?" "$WORK/ptc.log"
  t1=$(now)
  put ptc_srv_cpu_s "$(srv_cpu ptc)"
  put ptc_cpu "$(cpu_report ptc)"
  put ptc_client_cpu_s "$(cpu_s "$WORK/ptc.time")"
  put ptc_s "$(f "$t1 - $t0")"
  # TS ERRORS DIFFS ROWS DIFF_ROWS CHUNKS SKIPPED TIME TABLE
  line=$(awk '$NF == "sbverify.sbtest1"' "$WORK/ptc.log")
  [ "$(echo "$line" | awk '{ print $2 "/" $4 }')" = "0/$VERIFY_ROWS" ] || fail "pt-table-checksum: errors or a row count other than $VERIFY_ROWS" "$WORK/ptc.log"
  put ptc_chunks "$(echo "$line" | awk '{ print $6 }')"
  progress "verify: pt-table-checksum $(get ptc_s) s, $(get ptc_chunks) chunks"
  M 1 -e "DROP DATABASE ref_ptc; DROP DATABASE sbverify"
  M 2 -e "DROP DATABASE sbverify"
}

# ---------------------------------------------------------------- 5. memory

measure_memory() {
  local id rows n
  use_map bench_memory
  sb_map memory
  n=0
  for rows in "$MEM_ROWS_A" "$MEM_ROWS_B"; do
    n=$((n + 1))
    id=$(add_shard 1 "sbmem$n")
    add_range $(((n - 1) * 100000000)) "$id"
    progress "memory: sysbench prepare $rows rows on server 1"
    prepare 1 "sbmem$n" "$rows"
    settle 1
    progress "memory: /usr/bin/time -v shardctl move of $rows rows (server 1 -> 2; verify and cleanup on)"
    /usr/bin/time -v -o "$WORK/mem$n.time" timeout -k 10 "$STEP_TIMEOUT" "${SC[@]}" move --shard "$id" --to "$(addr 2)" --yes -o json \
      >"$WORK/mem$n.json" 2>"$WORK/mem$n.json.err" || fail "shardctl move exited $?" "$WORK/mem$n.json.err"
    [ "$(jq -r .result.rows_copied "$WORK/mem$n.json")" = "$rows" ] || fail "move of $rows rows copied $(jq -r .result.rows_copied "$WORK/mem$n.json")"
    put "mem${n}_rows" "$rows"
    put "mem${n}_rss_mb" "$(rss_mb "$WORK/mem$n.time")"
    put "mem${n}_wall_s" "$(awk '/Elapsed \(wall clock\)/ { n = split($NF, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; printf "%.1f", s }' "$WORK/mem$n.time")"
    put "mem${n}_steps" "$(jq -c '.result.step_seconds | with_entries(.value |= (. * 100 | round / 100))' "$WORK/mem$n.json")"
    progress "memory: $rows rows: max RSS $(get "mem${n}_rss_mb") MB, $(get "mem${n}_wall_s") s"
    M 2 -e "DROP DATABASE \`sbmem$n\`"
  done
}

# ---------------------------------------------------------------- 2. catch-up

measure_catchup() {
  local id rc plan t0 t1 sbargs
  use_map bench_catchup
  sb_map catchup
  id=$(add_shard 1 sbcatchup)
  add_range 0 "$id"
  progress "catch-up: sysbench prepare $CATCHUP_ROWS rows on server 1"
  prepare 1 sbcatchup "$CATCHUP_ROWS"
  progress "catch-up: SHARDCTL_FAULT=after:copy shardctl move (expect exit 137)"
  rc=0
  # (in a subshell whose stderr is /dev/null: bash reports the SIGKILL there, not on the terminal)
  (SHARDCTL_FAULT=after:copy T "${SC[@]}" move --shard "$id" --to "$(addr 2)" --yes -o json --no-verify --keep-source \
    >"$WORK/catchup1.json" 2>"$WORK/catchup1.json.err"; exit $?) 2>/dev/null || rc=$?
  [ $rc -eq 137 ] || fail "the move exited $rc, not 137 (killed after the copy)" "$WORK/catchup1.json.err"
  sc "$WORK/catchup-plans.json" plan list
  plan=$(jq -r '.[0].id' "$WORK/catchup-plans.json")
  [ "$(jq -r '.[0].step' "$WORK/catchup-plans.json")" = catchup ] || fail "plan $plan is not stopped before the catch-up" "$WORK/catchup-plans.json"

  native native_prepare sbcatchup || true
  progress "catch-up: sysbench oltp_write_only --threads=$SB_THREADS --time=$CATCHUP_T on the source (the backlog)"
  sbargs=$(sysbench_args 1 sbcatchup "$CATCHUP_ROWS")
  # shellcheck disable=SC2086
  T sysbench oltp_write_only $sbargs --threads="$SB_THREADS" --time="$CATCHUP_T" --report-interval=0 run >"$WORK/catchup-sysbench.log" 2>&1 ||
    fail "sysbench oltp_write_only failed" "$WORK/catchup-sysbench.log"
  put catchup_tps "$(sed -n 's/.*transactions: *[0-9]* *(\([0-9.]*\) per sec.).*/\1/p' "$WORK/catchup-sysbench.log")"
  put catchup_tx "$(sed -n 's/.*transactions: *\([0-9]*\) .*/\1/p' "$WORK/catchup-sysbench.log")"
  local backlog_end; backlog_end=$(source_gtid)

  progress "catch-up: shardctl plan resume $plan"
  cpu_mark catchup
  t0=$(now)
  /usr/bin/time -v -o "$WORK/catchup2.time" timeout -k 10 "$STEP_TIMEOUT" "${SC[@]}" plan resume "$plan" -o json >"$WORK/catchup2.json" 2>"$WORK/catchup2.json.err" ||
    fail "shardctl plan resume exited $?" "$WORK/catchup2.json.err"
  t1=$(now)
  put catchup_shardctl_cpu_s "$(cpu_s "$WORK/catchup2.time")"
  put catchup_cpu "$(cpu_report catchup)"
  [ "$(jq -r .state "$WORK/catchup2.json")" = done ] || fail "the resumed plan did not finish" "$WORK/catchup2.json"
  put catchup_s "$(f "$(jq -r .result.step_seconds.catchup "$WORK/catchup2.json")")"
  put catchup_events "$(jq -r .result.events_applied "$WORK/catchup2.json")"
  put catchup_resume_s "$(f "$t1 - $t0")"
  put catchup_steps "$(jq -c '.result.step_seconds | with_entries(.value |= (. * 100 | round / 100))' "$WORK/catchup2.json")"
  progress "catch-up: $(get catchup_events) events in $(get catchup_s) s (backlog of $CATCHUP_T s at $(get catchup_tps) tps)"
  [ -z "$(get native_settings)" ] || native native_replay sbcatchup "$backlog_end" || true
  M 1 -e "DROP DATABASE sbcatchup"
  M 2 -e "DROP DATABASE sbcatchup"
}

# ---------------------------------------------------------------- 3. blackout

measure_blackout() {
  local i to lo hi ms worst s
  use_map bench_blackout
  sc "$WORK/blackout-init.json" shardmap init
  progress "blackout: sandbox seed 4 shards x $EMPLOYEES employees"
  sc "$WORK/seed.json" sandbox seed --sandbox-dir "$DIR" --base-port "$BASE" --shards 4 --employees "$EMPLOYEES"
  # shards 1 and 4 on server 1, shard 2 on server 2, shard 3 on server 3 (round robin)
  [ "$(jq -r '.[] | select(.shard_id == 1) | .server' "$WORK/seed.json")" = "$(addr 1)" ] || fail "shard 1 is not on server 1" "$WORK/seed.json"
  [ "$(jq -r '.[] | select(.shard_id == 4) | .server' "$WORK/seed.json")" = "$(addr 1)" ] || fail "shard 4 is not on server 1" "$WORK/seed.json"
  [ "$(jq -r '.[] | select(.shard_id == 2) | .server' "$WORK/seed.json")" = "$(addr 2)" ] || fail "shard 2 is not on server 2" "$WORK/seed.json"
  # The moving shard has a table with an AUTO_INCREMENT counter (the cutover
  # carries it), and its servers hold $BLACKOUT_TABLES tables in another
  # schema: what the blackout reads must not grow with them.
  M 1 "$(jq -r '.[] | select(.shard_id == 1) | .schema' "$WORK/seed.json")" -e \
    "CREATE TABLE tickets (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, emp_no INT NOT NULL); INSERT INTO tickets (emp_no) SELECT emp_no FROM employees"
  if [ "$BLACKOUT_TABLES" -gt 0 ]; then
    progress "blackout: $BLACKOUT_TABLES tables in schema bench_others on servers 1 and 2"
    for s in 1 2; do
      { echo "CREATE DATABASE bench_others;"
        seq "$BLACKOUT_TABLES" | awk '{ printf "CREATE TABLE bench_others.t%d (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL);\n", $1 }'
      } | M "$s"
    done
  fi
  hi=$((2 * EMPLOYEES + 1))
  # moving: shard 1, which goes back and forth between servers 1 and 2;
  # other: shard 4, which stays on server 1 (the source of every other cutover,
  # the target of the others). --concurrency is per group: 4 writers each.
  timeout -k 10 "$STEP_TIMEOUT" "${SC[@]}" load --keys "moving=1-$hi" --keys "other=3000001-$((3000000 + hi))" \
    --concurrency "$LOAD_CONC" --rate 0 --ledger "$WORK/ledger.jsonl" -o json >"$WORK/load.json" 2>"$WORK/load.err" &
  echo $! >"$LOAD_PID_FILE"
  sleep 2
  kill -0 "$(cat "$LOAD_PID_FILE")" 2>/dev/null || fail "shardctl load stopped" "$WORK/load.err"
  : >"$WORK/blackouts"
  for i in $(seq "$CUTOVERS"); do
    if [ $((i % 2)) -eq 1 ]; then to=2; else to=1; fi
    # --no-verify: under a full-rate writer on the moving keys the verify step
    # reports differences it cannot settle (see docs/BENCHMARKS.md).
    sc "$WORK/cutover$i.json" move --shard 1 --to "$(addr $to)" --yes --no-verify ${BENCH_MAX_BLACKOUT:+--max-blackout "$BENCH_MAX_BLACKOUT"}
    ms=$(jq -r .result.blackout_ms "$WORK/cutover$i.json")
    echo "$ms $(jq -r '.cutover_attempts | length' "$WORK/cutover$i.json") $(jq -r '[.cutover_attempts[].blackout_ms // 0] | max' "$WORK/cutover$i.json")" >>"$WORK/blackouts"
    jq -r --arg i "$i" '.cutover_attempts[] | "#\($i): " + (if (.phases_ms // {}) == {} then "" else "\(.blackout_ms) ms = " + (.phases_ms | to_entries | map("\(.key) \(.value)") | join(" + ")) + " " end) + "(\(.result))"' \
      "$WORK/cutover$i.json" >>"$WORK/blackout-phases"
    echo "$(jq -r '[.result.step_seconds[]] | add | . * 10 | round / 10' "$WORK/cutover$i.json") (catch-up $(jq -r '.result.step_seconds.catchup * 10 | round / 10' "$WORK/cutover$i.json"))" >>"$WORK/blackout-moves"
    progress "blackout: cutover $i/$CUTOVERS to server $to: $ms ms ($(jq -r '.cutover_attempts | length' "$WORK/cutover$i.json") attempt(s); move $(jq -r '[.result.step_seconds[]] | add | . * 10 | round / 10' "$WORK/cutover$i.json") s)"
  done
  sleep 1
  kill -TERM "$(cat "$LOAD_PID_FILE")"
  bounded_wait "$(cat "$LOAD_PID_FILE")" 60 || fail "shardctl load exited $?" "$WORK/load.err"
  : >"$LOAD_PID_FILE"
  put blackout_move_s "$(paste -sd, "$WORK/blackout-moves" | sed 's/,/, /g')"
  put blackout_all "$(awk '{ printf "%s%.0f", (NR > 1 ? " " : ""), $1 }' "$WORK/blackouts")"
  put blackout_worst_ms "$(sort -g "$WORK/blackouts" | tail -n 1 | awk '{ printf "%.1f", $1 }')"
  put blackout_median_ms "$(sort -g "$WORK/blackouts" | awk '{ v[NR] = $1 } END { if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m }')"
  put blackout_attempts "$(awk '{ s += $2 } END { print s }' "$WORK/blackouts")"
  put blackout_worst_attempt_ms "$(awk '$3 > m { m = $3 } END { printf "%.1f", m }' "$WORK/blackouts")"
  put load_acked "$(jq -r .Acked "$WORK/load.json")"
  put load_rate "$(jq -r '.Acked / (.Elapsed / 1e9) | round' "$WORK/load.json")"
  put moving_retries "$(jq -r .Groups.moving.Retries "$WORK/load.json")"
  put moving_errors "$(jq -r .Groups.moving.Errors "$WORK/load.json")"
  put moving_gap_ms "$(jq -r '.Groups.moving.LongestGap / 1e6 | round' "$WORK/load.json")"
  put other_errors "$(jq -r .Groups.other.Errors "$WORK/load.json")"
  put other_retries "$(jq -r .Groups.other.Retries "$WORK/load.json")"
  put other_gap_ms "$(jq -r '.Groups.other.LongestGap / 1e6 | round' "$WORK/load.json")"
  progress "blackout: shardctl load check"
  if T "${SC[@]}" load check "$WORK/ledger.jsonl" -o json >"$WORK/ledger-check.json" 2>"$WORK/ledger-check.err"; then
    put ledger_check "ok ($(jq -r .Keys "$WORK/ledger-check.json") keys)"
  else
    put ledger_check "FAILED: $(jq -c .Problems "$WORK/ledger-check.json" 2>/dev/null | cut -c1-200)"
  fi
  gzip -f "$WORK/ledger.jsonl"
  [ "$BLACKOUT_TABLES" -eq 0 ] || { M 1 -e "DROP DATABASE bench_others"; M 2 -e "DROP DATABASE bench_others"; }
  progress "blackout: worst $(get blackout_worst_ms) ms, median $(get blackout_median_ms) ms; other shards $(get other_errors) errors; ledger $(get ledger_check)"
}

# ---------------------------------------------------------------- 3c. blackout against the tenants
#
# measure_tenants: three tenants moved out of a LIST shard of TENANT_SIZES
# tenants (half with rows, as `sandbox seed --list` lays them out) into a
# shard of 300, one size after the other in this run so they share its
# conditions; then a merge of two LIST shards of TENANT_MERGE tenants each.
# No write load: the row measures what the blackout does per tenant the
# shards own, which the load would only blur. Puts tenants_<N>_ms (blackout),
# tenants_<N>_attempts, tenants_<N>_kb (the plan file), tenants_merge_*.
measure_tenants() {
  local n m i k
  for n in $TENANT_SIZES; do
    use_map "bench_tenants$n"
    sc "$WORK/tenants$n-init.json" shardmap init
    progress "tenants: a LIST shard of $n tenants on server 1, one of 300 on server 2"
    # the seed is idempotent: the second run leaves shard 1 and adds shard 2
    sc "$WORK/tenants$n-seed1.json" sandbox seed --sandbox-dir "$DIR" --base-port "$BASE" --list --shards 1 --employees $((n / 2)) --schema-prefix "tn${n}_"
    sc "$WORK/tenants$n-seed2.json" sandbox seed --sandbox-dir "$DIR" --base-port "$BASE" --list --shards 2 --employees 150 --schema-prefix "tn${n}_"
    # TENANT_MOVES moves of 3 tenants each (11-13, 14-16, ...): the median blackout
    : >"$WORK/tenants$n-ms"
    for i in $(seq "$TENANT_MOVES"); do
      k=$((8 + 3 * i))
      sc "$WORK/tenants$n-$i.json" move --shard 1 --keys "$k,$((k + 1)),$((k + 2))" --into 2 --yes
      jq -r '.result.blackout_ms * 10 | round / 10' "$WORK/tenants$n-$i.json" >>"$WORK/tenants$n-ms"
      jq -r --arg n "$n" '.cutover_attempts[] | "\($n) tenants: " + (if (.phases_ms // {}) == {} then "" else "\(.blackout_ms) ms = " + (.phases_ms | to_entries | map("\(.key) \(.value)") | join(" + ")) + " " end) + "(\(.result))"' \
        "$WORK/tenants$n-$i.json" >>"$WORK/tenants-phases"
    done
    put "tenants_${n}_ms" "$(sort -g "$WORK/tenants$n-ms" | awk '{ v[NR] = $1 } END { if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m }')"
    put "tenants_${n}_all" "$(paste -sd' ' "$WORK/tenants$n-ms")"
    put "tenants_${n}_attempts" "$(cat "$WORK"/tenants$n-*.json | jq -s '[.[] | objects | .cutover_attempts | length] | add')"
    put "tenants_${n}_kb" "$(f "$(stat -c %s "$(ls -t "$PLANS"/*.json | head -n 1)") / 1024")"
    progress "tenants: $n tenants: blackout median $(get "tenants_${n}_ms") ms (all: $(get "tenants_${n}_all")) in $(get "tenants_${n}_attempts") attempt(s), plan $(get "tenants_${n}_kb") KB"
    for m in 1 2; do M "$m" -e "DROP DATABASE IF EXISTS tn${n}_$m"; done
  done
  m=$TENANT_MERGE
  [ "$m" -gt 0 ] || return 0
  use_map bench_tenants_merge
  sc "$WORK/tmerge-init.json" shardmap init
  progress "tenants: two LIST shards of $m tenants each, on servers 1 and 2"
  sc "$WORK/tmerge-seed.json" sandbox seed --sandbox-dir "$DIR" --base-port "$BASE" --list --shards 2 --employees $((m / 2)) --schema-prefix tmerge_
  # Three attempts at most: a merge whose every attempt overruns the budget
  # is a figure too (read from the plan file), not a failed row.
  sc "$WORK/tmerge.json" merge --shard 2 --into 1 --yes --cutover-attempts 3 || true
  local pf; pf=$(ls "$PLANS"/*.json)
  put tenants_merge_ms "$(jq -r '.plan | if .steps[] | select(.name == "cutover") | .state == "done" then (.result.blackout_ms * 10 | round / 10 | tostring) else "no cutover (attempts: " + ([.cutover_attempts[].blackout_ms | round | tostring] | join(", ")) + " ms)" end' "$pf")"
  put tenants_merge_attempts "$(jq -r '.plan.cutover_attempts | length' "$pf")"
  put tenants_merge_kb "$(f "$(stat -c %s "$pf") / 1024")"
  jq -r '.plan.cutover_attempts[] | "merge: " + (if (.phases_ms // {}) == {} then "" else "\(.blackout_ms) ms = " + (.phases_ms | to_entries | map("\(.key) \(.value)") | join(" + ")) + " " end) + "(\(.result))"' \
    "$pf" >>"$WORK/tenants-phases"
  progress "tenants: merge of two shards of $m tenants: blackout $(get tenants_merge_ms) ms in $(get tenants_merge_attempts) attempt(s)"
  for m in 1 2; do M "$m" -e "DROP DATABASE IF EXISTS tmerge_$m"; done
}

# ---------------------------------------------------------------- 3b. blackout with replicas

# measure_blackout_replicas: the blackout row's cutovers again, on a sandbox
# of its own (2 servers with one GTID replica each, ports BASE+10..BASE+13,
# in $DIR-replicas) and with --max-lag 1s --replica auto, so the figure with
# replicas stands beside the one without. No extra tables beside the shard;
# the same load (moving keys only). Its sandbox goes down at the end.
measure_blackout_replicas() {
  local i to ms rbase=$((BASE + 10)) rdir="$DIR-replicas" rc=0
  local rsc=("$S" --config "$CONF" --shardmap "127.0.0.1:$rbase/bench_blackout_r" --plan-dir "$WORK/plans-blackout-r")
  local sbx=(--sandbox-dir "$rdir" --base-port "$rbase" --servers 2)
  "$S" sandbox down "${sbx[@]}" --replicas 1 --purge >/dev/null 2>&1 || true
  progress "blackout with replicas: sandbox of 2 servers with 1 replica each on ports $rbase-$((rbase + 3))"
  T "$S" sandbox up --flavor "$FLAVOR" --server-version "$VERSION" "${sbx[@]}" --replicas 1 --buffer-pool-mb "$POOL_MB" >"$WORK/sandbox-r.log" 2>&1 ||
    fail "sandbox up --replicas 1 failed" "$WORK/sandbox-r.log" || return 1
  (
    set -e
    T "${rsc[@]}" shardmap init -o json >"$WORK/r-init.json" 2>"$WORK/r-init.err" || fail "shardmap init failed" "$WORK/r-init.err"
    T "${rsc[@]}" sandbox seed "${sbx[@]}" --shards 2 --employees "$EMPLOYEES" -o json >"$WORK/r-seed.json" 2>"$WORK/r-seed.err" ||
      fail "sandbox seed failed" "$WORK/r-seed.err"
    timeout -k 10 "$STEP_TIMEOUT" "${rsc[@]}" load --keys "moving=1-$((2 * EMPLOYEES + 1))" \
      --concurrency "$LOAD_CONC" --rate 0 --ledger "$WORK/ledger-r.jsonl" -o json >"$WORK/load-r.json" 2>"$WORK/load-r.err" &
    echo $! >"$WORK/load-r.pid"
    sleep 2
    : >"$WORK/blackouts-r"
    for i in $(seq "$CUTOVERS"); do
      if [ $((i % 2)) -eq 1 ]; then to=$((rbase + 1)); else to=$rbase; fi
      T "${rsc[@]}" move --shard 1 --to "127.0.0.1:$to" --yes --no-verify --max-lag 1s --replica auto -o json \
        >"$WORK/cutover-r$i.json" 2>"$WORK/cutover-r$i.err" || fail "move with --max-lag 1s --replica auto failed" "$WORK/cutover-r$i.err"
      ms=$(jq -r .result.blackout_ms "$WORK/cutover-r$i.json")
      echo "$ms" >>"$WORK/blackouts-r"
      progress "blackout with replicas: cutover $i/$CUTOVERS to port $to: $ms ms"
    done
    kill -TERM "$(cat "$WORK/load-r.pid")"
    bounded_wait "$(cat "$WORK/load-r.pid")" 60 || fail "shardctl load exited $?" "$WORK/load-r.err"
    put blackout_r_all "$(awk '{ printf "%s%.0f", (NR > 1 ? " " : ""), $1 }' "$WORK/blackouts-r")"
    put blackout_r_worst_ms "$(sort -g "$WORK/blackouts-r" | tail -n 1 | awk '{ printf "%.1f", $1 }')"
    put blackout_r_median_ms "$(sort -g "$WORK/blackouts-r" | awk '{ v[NR] = $1 } END { if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m }')"
    if T "${rsc[@]}" load check "$WORK/ledger-r.jsonl" -o json >"$WORK/ledger-check-r.json" 2>"$WORK/ledger-check-r.err"; then
      put ledger_check_r "ok ($(jq -r .Keys "$WORK/ledger-check-r.json") keys)"
    else
      put ledger_check_r "FAILED"
    fi
  ) || rc=$?
  [ ! -s "$WORK/load-r.pid" ] || kill -TERM "$(cat "$WORK/load-r.pid")" 2>/dev/null || true
  "$S" sandbox down "${sbx[@]}" --replicas 1 --purge >/dev/null 2>&1 || true
  [ "$rc" -eq 0 ] || return "$rc"
  progress "blackout with replicas: worst $(get blackout_r_worst_ms) ms, median $(get blackout_r_median_ms) ms; ledger $(get ledger_check_r)"
}

# ---------------------------------------------------------------- 4. prune

measure_prune() {
  local a b t0 t1 mode rows
  use_map bench_prune
  sb_map prune
  a=$(add_shard 1 sbprune)
  b=$(add_shard 2 sbprune_owner)
  # shard A owns only keys below 1: every sysbench row (id >= 1) in it is not owned
  add_range -1000000 "$a"
  add_range 1 "$b"
  progress "prune: sysbench prepare $PRUNE_ROWS rows (the pristine copy)"
  prepare 1 prune_src "$PRUNE_ROWS"
  copy_table() { # SCHEMA: an identical copy of prune_src.sbtest1, made right before its run
    M 1 -e "DROP DATABASE IF EXISTS \`$1\`; CREATE DATABASE \`$1\`; CREATE TABLE \`$1\`.sbtest1 LIKE prune_src.sbtest1;
      INSERT INTO \`$1\`.sbtest1 SELECT * FROM prune_src.sbtest1"
    settle 1
  }

  copy_table sbprune
  sc "$WORK/prune-dry.json" prune --shard "$a" --dry-run
  rows=$(jq -r '[.[].rows] | add' "$WORK/prune-dry.json")
  [ "$rows" = "$PRUNE_ROWS" ] || fail "prune --dry-run counts $rows rows, not $PRUNE_ROWS" "$WORK/prune-dry.json"
  # pt_archiver MODE: pt-archiver --purge on a fresh copy; its time in pt_MODE_s
  pt_archiver() {
    local mode=$1
    copy_table "pt_$mode"
    progress "prune: pt-archiver --purge --limit $PRUNE_CHUNK --commit-each $([ $mode = bulk ] && echo --bulk-delete)"
    cpu_mark "pt_$mode"
    t0=$(now)
    # --no-safe-auto-increment: delete the highest id too, as shardctl does (all rows)
    T pt-archiver --source "h=127.0.0.1,P=$(port 1),u=$DBUSER,p=$DBPASS,D=pt_$mode,t=sbtest1,A=utf8mb4" \
      --purge --where '1=1' --limit "$PRUNE_CHUNK" --commit-each --no-safe-auto-increment --statistics \
      $([ $mode = bulk ] && echo --bulk-delete) >"$WORK/pt-$mode.log" 2>&1 || fail "pt-archiver failed" "$WORK/pt-$mode.log"
    t1=$(now)
    put "pt_${mode}_cpu" "$(cpu_report "pt_$mode")"
    put "pt_${mode}_s" "$(f "$t1 - $t0")"
    put "pt_${mode}_deleted" "$(sed -n 's/^DELETE \([0-9]*\)/\1/p' "$WORK/pt-$mode.log")"
    [ "$(count 1 "pt_$mode")" = 0 ] || fail "rows left after pt-archiver"
    progress "prune: pt-archiver ($mode) $(get "pt_${mode}_s") s for $(get "pt_${mode}_deleted") rows"
    M 1 -e "DROP DATABASE pt_$mode"
  }
  local round ratios="" times="" pts=""
  for round in $(seq 1 "$PRUNE_ROUNDS"); do
    [ "$round" = 1 ] || copy_table sbprune
    progress "prune: round $round of $PRUNE_ROUNDS: shardctl prune --shard $a --chunk-rows $PRUNE_CHUNK"
    cpu_mark prune
    t0=$(now)
    sc "$WORK/prune.json" prune --shard "$a" --chunk-rows "$PRUNE_CHUNK"
    t1=$(now)
    put prune_cpu "$(cpu_report prune)"
    put prune_s "$(f "$t1 - $t0")"
    put prune_deleted "$(jq -r '[.[].deleted] | add' "$WORK/prune.json")"
    [ "$(count 1 sbprune)" = 0 ] || fail "rows left after shardctl prune"
    progress "prune: shardctl $(get prune_s) s for $(get prune_deleted) rows"
    M 1 -e "DROP DATABASE sbprune"
    pt_archiver bulk
    times="$times $(get prune_s)"; pts="$pts $(get pt_bulk_s)"
    ratios="$ratios $(div "$(get pt_bulk_s)" "$(get prune_s)")"
  done
  put prune_rounds "shardctl$times s; pt-archiver --bulk-delete$pts s; ratios$ratios"
  put prune_ratio "$(echo $ratios | tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')"
  progress "prune: $(get prune_rounds); median ratio $(get prune_ratio)"
  # pt-archiver's row-at-a-time mode is the slowest reference of the run
  # (13 s for the smoke test's 20k rows beside the tests) and runs no code of
  # shardctl's: the smoke test leaves it out.
  [ -n "$SMALL" ] || pt_archiver row
  M 1 -e "DROP DATABASE prune_src"
}

# measure_fkcheck: the planning cost of a split's check of a foreign key
# without the shard key on the rows (docs/schemas.md), on Sakila's shape:
# FK_ROWS payments reference FK_ROWS/2 rentals by the rental's own id, ten
# payments per employee (the shard key). Timed: \`split --dry-run\` (every
# planning check, the rows' one included), the same dry run once the key is
# dropped (the difference is the check), and the check's join as one
# unchunked statement (what an operator would run by hand).
measure_fkcheck() {
  local id at t0 t1 mf="$WORK/map-fk.json"
  use_map bench_fk
  sc "$mf" shardmap init
  sc "$mf" shardmap add-function cust --type RANGE
  sc "$mf" shardmap add-column rentals emp_no --function cust
  sc "$mf" shardmap add-column payments emp_no --function cust
  id=$(add_shard 1 fkshard)
  sc "$mf" shardmap add-range --function cust --lower 0 --shard "$id"
  at=$((FK_ROWS / 20))
  progress "fkcheck: $FK_ROWS payments -> $((FK_ROWS / 2)) rentals"
  local ddl="CREATE TABLE rentals (rental_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, item_id INT NOT NULL, rented DATETIME NOT NULL, KEY emp (emp_no));
    CREATE TABLE payments (payment_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, rental_id INT NULL, amount DECIMAL(5,2) NOT NULL, paid DATETIME NOT NULL,
      KEY emp (emp_no), KEY rental (rental_id), CONSTRAINT fk_payment_rental FOREIGN KEY (rental_id) REFERENCES rentals (rental_id) ON DELETE SET NULL);"
  M 1 fkshard -e "$ddl
    $(echo "INSERT INTO rentals SELECT seq, seq DIV 5, seq % 1000, '2005-05-24 22:53:30' FROM seq_1_to_$((FK_ROWS / 2));
    SET foreign_key_checks = 0;
    INSERT INTO payments SELECT seq, ((seq + 1) DIV 2) DIV 5, (seq + 1) DIV 2, 2.99, '2005-05-25 11:30:37' FROM seq_1_to_$FK_ROWS;" | seq_sql)
    ANALYZE TABLE rentals, payments;" >/dev/null
  settle 1
  progress "fkcheck: split --shard $id --at $at --dry-run"
  t0=$(now)
  sc "$WORK/fk-dry.json" split --shard "$id" --at "$at" --to "$(addr 2)" --dry-run
  t1=$(now)
  put fk_plan_s "$(f "$t1 - $t0")"
  put fk_rows "$(jq -r '.key_checks[0].rows' "$WORK/fk-dry.json")"
  [ "$(get fk_rows)" = "$FK_ROWS" ] || fail "the dry run read $(get fk_rows) child rows, not $FK_ROWS" "$WORK/fk-dry.json"
  t0=$(now)
  M 1 -N -e "SELECT COUNT(*) FROM fkshard.payments c JOIN fkshard.rentals p ON p.rental_id = c.rental_id WHERE (c.emp_no >= $at) <> (p.emp_no >= $at)" >"$WORK/fk-join.txt"
  t1=$(now)
  put fk_join_s "$(f "$t1 - $t0")"
  M 1 -e "ALTER TABLE fkshard.payments DROP FOREIGN KEY fk_payment_rental"
  t0=$(now)
  sc "$WORK/fk-dry-nokey.json" split --shard "$id" --at "$at" --to "$(addr 2)" --dry-run
  t1=$(now)
  put fk_nokey_s "$(f "$t1 - $t0")"
  progress "fkcheck: dry run $(get fk_plan_s) s with the key, $(get fk_nokey_s) s without; one-statement join $(get fk_join_s) s"
  # The merge's planning: a second shard of the same shape on server 2 (the
  # next employees, ids after the first shard's), merged into the first: its
  # collision scan walks both servers' primary and unique keys.
  local id2 t2=$((FK_ROWS / 2))
  id2=$(add_shard 2 fkshard2)
  M 2 fkshard2 -e "$ddl
    SET foreign_key_checks = 0;
    $(echo "INSERT INTO rentals SELECT $FK_ROWS + seq, ($FK_ROWS + seq) DIV 5, seq % 1000, '2005-05-24 22:53:30' FROM seq_1_to_$t2;
    INSERT INTO payments SELECT 2 * $FK_ROWS + seq, ($FK_ROWS + (seq + 1) DIV 2) DIV 5, $FK_ROWS + (seq + 1) DIV 2, 2.99, '2005-05-25 11:30:37' FROM seq_1_to_$FK_ROWS;" | seq_sql)
    ANALYZE TABLE rentals, payments;" >/dev/null
  sc "$mf" shardmap add-range --function cust --lower $((FK_ROWS / 5)) --shard "$id2"
  settle 1
  settle 2
  progress "fkcheck: merge --shard $id2 --into $id --dry-run"
  t0=$(now)
  sc "$WORK/fk-merge-dry.json" merge --shard "$id2" --into "$id" --dry-run
  t1=$(now)
  put fk_merge_s "$(f "$t1 - $t0")"
  put fk_merge_scanned "$(jq -r '.collision_scan.scanned | join(", ")' "$WORK/fk-merge-dry.json")"
  t0=$(now)
  M 1 -N -e "SELECT COUNT(*) FROM fkshard.payments; SELECT COUNT(*) FROM fkshard.rentals" >/dev/null
  M 2 -N -e "SELECT COUNT(*) FROM fkshard2.payments; SELECT COUNT(*) FROM fkshard2.rentals" >/dev/null
  t1=$(now)
  put fk_count_s "$(f "$t1 - $t0")"
  progress "fkcheck: merge dry run $(get fk_merge_s) s (scanned $(get fk_merge_scanned)); counting both shards' rows $(get fk_count_s) s"
  M 1 -e "DROP DATABASE fkshard"
  M 2 -e "DROP DATABASE fkshard2"
}

# measure_fleet: FLEET small shards of the sandbox's employees table (the one
# `shardctl load` writes), RANGE mapped (shard i owns [i*100000, (i+1)*100000)),
# round-robin on the 3 servers, registered in one shard map. Timed first: the
# commands cron runs over a whole fleet. Then the fleet is given work: FLEET_SPLIT
# shards of FLEET_BIG rows on server 1 (over --max-shard-rows: splits),
# FLEET_MED shards of FLEET_MEDROWS rows on server 1 (the share moves), and
# FLEET_COLD pairs of empty neighbours (under --min-shard-rows together:
# merges); every other shard holds 20 rows. --max-server-share is set so that
# after the splits server 1 still holds about 1.5 medium shards too many.
# Under `shardctl load` (a ledger over one split, one moved, one merged and one
# untouched shard), `rebalance --apply --concurrency 4 --same-server` runs the
# proposal, timed; then `load check` and a second dry run.
measure_fleet() {
  local s i sql reg sep t0 t1 cmd name n lower srv total l1 share pol rc touched other
  local big=4000 med=1000 cold_every
  use_map bench_fleet
  sc "$WORK/map-fleet.json" shardmap init
  sc "$WORK/map-fleet.json" shardmap add-function fl --type RANGE
  sc "$WORK/map-fleet.json" shardmap add-column employees emp_no --function fl
  local -A rows=()
  for ((i = 1; i <= FLEET; i++)); do rows[$i]=20; done
  for ((i = 0; i < FLEET_SPLIT; i++)); do rows[$((1 + 3 * i))]=$big; done
  for ((i = 0; i < FLEET_MED; i++)); do rows[$((1 + 3 * (FLEET_SPLIT + i)))]=$med; done
  cold_every=$((FLEET / (FLEET_COLD + 1)))
  for ((i = 1; i <= FLEET_COLD; i++)); do rows[$((i * cold_every))]=0; rows[$((i * cold_every + 1))]=0; done
  total=0; l1=0
  for ((i = 1; i <= FLEET; i++)); do
    total=$((total + rows[$i]))
    [ $(((i - 1) % 3)) -ne 0 ] || l1=$((l1 + rows[$i]))
  done
  # server 1 after the splits (half of each big shard leaves), less 1.5 medium shards
  share=$(awk -v l="$l1" -v n="$FLEET_SPLIT" -v b="$big" -v m="$med" -v t="$total" 'BEGIN { printf "%.4f", (l - n * b / 2 - 1.5 * m) / t }')
  pol=(--max-shard-rows 3000 --min-shard-rows 18 --max-server-share "$share" --exact)
  put fleet_policy "${pol[*]}"
  progress "fleet: $FLEET shards on 3 servers ($FLEET_SPLIT of $big rows, $FLEET_MED of $med, $((2 * FLEET_COLD)) empty, the others 20; $total rows, server 1 $l1)"
  for s in 1 2 3; do
    sql=""
    for ((i = s; i <= FLEET; i += 3)); do
      lower=$((i * 100000))
      sql+="CREATE DATABASE fl_$i; USE fl_$i; ${EMP_DDL};"
      [ "${rows[$i]}" -eq 0 ] || sql+=" INSERT INTO employees SELECT $lower + seq, '1960-01-01', 'F$i', 'L', 'M', '1990-01-01' FROM seq_1_to_${rows[$i]};"
      sql+=$'\n'
    done
    echo "$sql" | seq_sql | M "$s" >/dev/null &
  done
  wait
  reg="INSERT INTO locations (shard_id, host, port, schema_name) VALUES "
  sep=""
  for ((i = 1; i <= FLEET; i++)); do
    reg+="$sep($i, '127.0.0.1', $(port $(((i - 1) % 3 + 1))), 'fl_$i')"
    sep=", "
  done
  reg+="; INSERT INTO ranges (func_id, lower_bound, shard_id) SELECT f.func_id, l.shard_id * 100000, l.shard_id FROM locations l JOIN partition_functions f ON f.name = 'fl';
    UPDATE version SET version = version + 1 WHERE id = 1;"
  M 1 bench_fleet -e "$reg"
  for cmd in "status" "status --exact" "rebalance --dry-run --max-shard-rows 1000000" "plan list"; do
    name=$(echo "$cmd" | tr ' -' '__' | tr -s _)
    t0=$(now)
    # shellcheck disable=SC2086
    sc "$WORK/fleet-$name.json" $cmd
    t1=$(now)
    put "fleet_$name" "$(f "$t1 - $t0")"
  done
  [ "$(jq '.shards | length' "$WORK/fleet-status_exact.json")" = "$FLEET" ] || fail "status --exact lists $(jq '.shards | length' "$WORK/fleet-status_exact.json") shards, not $FLEET" "$WORK/fleet-status_exact.json"
  [ "$(jq '[.shards[].rows] | add' "$WORK/fleet-status_exact.json")" = "$total" ] || fail "status --exact counts the wrong rows" "$WORK/fleet-status_exact.json"
  progress "fleet: status $(get fleet_status) s, --exact $(get fleet_status_exact) s, rebalance --dry-run $(get fleet_rebalance_dry_run_max_shard_rows_1000000) s, plan list $(get fleet_plan_list) s"

  # The work: a dry run of the policy, then the ledger load on shards it touches.
  t0=$(now)
  sc "$WORK/fleet-dry1.json" rebalance --dry-run "${pol[@]}"
  t1=$(now)
  put fleet_dry_s "$(f "$t1 - $t0")"
  put fleet_proposed "$(jq -r '[.proposed[].operation] | group_by(.) | map("\(length) \(.[0])") | join(", ")' "$WORK/fleet-dry1.json")"
  progress "fleet: rebalance --dry-run ${pol[*]}: $(get fleet_dry_s) s, proposed $(get fleet_proposed)"
  jq -e '[.planned[] | select(.error != null and .error != "")] | length == 0' "$WORK/fleet-dry1.json" >/dev/null ||
    fail "the dry run cannot plan some proposals" "$WORK/fleet-dry1.json"
  local ks=() sh
  sh=$(jq -r '[.proposed[] | select(.operation == "split")][0].shard_id // empty' "$WORK/fleet-dry1.json")
  [ -z "$sh" ] || ks+=(--keys "split=$((sh * 100000 + big * 3 / 4))-$((sh * 100000 + big * 3 / 4 + 40))")
  sh=$(jq -r '[.proposed[] | select(.operation == "move")][0].shard_id // empty' "$WORK/fleet-dry1.json")
  [ -z "$sh" ] || ks+=(--keys "move=$((sh * 100000 + 1))-$((sh * 100000 + 41))")
  # at most 8 keys on an empty shard, so it stays under --min-shard-rows with its neighbour
  sh=$(jq -r '[.proposed[] | select(.operation == "merge")][0].shard_id // empty' "$WORK/fleet-dry1.json")
  [ -z "$sh" ] || ks+=(--keys "merge=$((sh * 100000 + 1))-$((sh * 100000 + 9))")
  touched=" $(jq -r '[.proposed[] | .shard_id, (.into // empty)] | map(tostring) | join(" ")' "$WORK/fleet-dry1.json") "
  other=""
  for ((i = FLEET - FLEET % 3 + 1; i > 0; i -= 3)); do # server 1, the one that gives shards away
    [ "$i" -le "$FLEET" ] && [ "${rows[$i]}" -eq 20 ] && [[ "$touched" != *" $i "* ]] && { other=$i; break; }
  done
  ks+=(--keys "other=$((other * 100000 + 1))-$((other * 100000 + 21))")
  put fleet_load_keys "${ks[*]}"
  timeout -k 10 "$STEP_TIMEOUT" "${SC[@]}" load "${ks[@]}" --concurrency 2 --rate 400 --ledger "$WORK/fleet-ledger.jsonl" \
    -o json >"$WORK/fleet-load.json" 2>"$WORK/fleet-load.err" &
  echo $! >"$LOAD_PID_FILE"
  sleep 2
  kill -0 "$(cat "$LOAD_PID_FILE")" 2>/dev/null || fail "shardctl load stopped" "$WORK/fleet-load.err"

  put fleet_loadavg_apply "$(cut -d' ' -f1-3 /proc/loadavg)"
  progress "fleet: rebalance --apply --concurrency 4 --same-server under the load (${ks[*]})"
  rc=0
  t0=$(now)
  T "${SC[@]}" rebalance --apply "${pol[@]}" --concurrency 4 --same-server -o json >"$WORK/fleet-apply.json" 2>"$WORK/fleet-apply.err" || rc=$?
  t1=$(now)
  put fleet_loadavg_after "$(cut -d' ' -f1-3 /proc/loadavg)"
  put fleet_apply_s "$(f "$t1 - $t0")"
  put fleet_apply_rc "$rc"
  sleep 1
  kill -TERM "$(cat "$LOAD_PID_FILE")"
  bounded_wait "$(cat "$LOAD_PID_FILE")" 60 || fail "shardctl load exited $?" "$WORK/fleet-load.err"
  : >"$LOAD_PID_FILE"
  put fleet_finished "$(jq -r '[.finished[].operation] | group_by(.) | map("\(length) \(.[0])") | join(", ")' "$WORK/fleet-apply.json" 2>/dev/null)"
  put fleet_left "$(jq -r '[.left[] | "\(.operation) \(.shard_id) (\(.state // "")): \(.error // "")"] | join("; ")' "$WORK/fleet-apply.json" 2>/dev/null | cut -c1-400)"
  # per operation: blackout and whole run, from the plan files
  put fleet_blackouts "$(jq -rs '[.[].plan | select(.state == "done")] | sort_by(.operation, .source.shard_id) | map("\(.operation) \(.source.shard_id): \(.result.blackout_ms * 10 | round / 10) ms") | join(", ")' "$PLANS"/*.json 2>/dev/null)"
  put fleet_blackout_worst "$(jq -rs '[.[].plan | select(.state == "done") | .result.blackout_ms] | max // 0 | . * 10 | round / 10' "$PLANS"/*.json 2>/dev/null)"
  put fleet_op_s "$(jq -rs '[.[].plan | select(.state == "done") | [.result.step_seconds[]] | add] | "median \(sort | .[length / 2 | floor] * 10 | round / 10) s, max \(max * 10 | round / 10) s"' "$PLANS"/*.json 2>/dev/null)"
  put fleet_load_acked "$(jq -r .Acked "$WORK/fleet-load.json")"
  put fleet_load_groups "$(jq -r '.Groups | to_entries | map("\(.key): \(.value.Acked) acked, \(.value.Errors) errors, \(.value.Retries) retries, gap \(.value.LongestGap / 1e6 | round) ms") | join("; ")' "$WORK/fleet-load.json")"
  put fleet_other_errors "$(jq -r .Groups.other.Errors "$WORK/fleet-load.json")"
  progress "fleet: apply exit $rc in $(get fleet_apply_s) s: finished $(get fleet_finished); left: $(get fleet_left); worst blackout $(get fleet_blackout_worst) ms; load $(get fleet_load_groups)"
  t0=$(now)
  if T "${SC[@]}" load check "$WORK/fleet-ledger.jsonl" -o json >"$WORK/fleet-ledger-check.json" 2>"$WORK/fleet-ledger-check.err"; then
    put fleet_ledger "ok ($(jq -r .Keys "$WORK/fleet-ledger-check.json") keys)"
  else
    put fleet_ledger "FAILED: $(jq -c .Problems "$WORK/fleet-ledger-check.json" 2>/dev/null | cut -c1-300)"
  fi
  t1=$(now)
  put fleet_check_s "$(f "$t1 - $t0")"
  rc=0
  T "${SC[@]}" rebalance --dry-run "${pol[@]}" -o json >"$WORK/fleet-dry2.json" 2>"$WORK/fleet-dry2.err" || rc=$?
  put fleet_dry2 "exit $rc, $(jq -r '(.proposed | length | tostring) + " proposed" + (if (.unmet | length) > 0 then ", unmet: " + ([.unmet[] | "\(.shard_id // "") \(.server) \(.why)"] | join("; ")) else "" end)' "$WORK/fleet-dry2.json" 2>/dev/null | cut -c1-300)"
  progress "fleet: load check $(get fleet_ledger) in $(get fleet_check_s) s; second dry run: $(get fleet_dry2)"
  gzip -f "$WORK/fleet-ledger.jsonl"
  for s in 1 2 3; do M "$s" -N -e "SELECT CONCAT('DROP DATABASE \`', schema_name, '\`;') FROM information_schema.schemata WHERE schema_name LIKE 'fl\\_%'" >"$WORK/fleet-drop-$s.sql"; done
  for s in 1 2 3; do M "$s" <"$WORK/fleet-drop-$s.sql" >/dev/null & done
  wait
  [ "$(get fleet_apply_rc)" = 0 ] || fail "rebalance --apply exited $(get fleet_apply_rc)" "$WORK/fleet-apply.err"
  case "$(get fleet_ledger)" in ok*) ;; *) fail "ledger check: $(get fleet_ledger)" ;; esac
}

# ---------------------------------------------------------------- 11. scale

# restart_pool MB: the three servers stopped (data kept) and started again
# with an InnoDB buffer pool of MB MiB
restart_pool() {
  T "$S" sandbox down --sandbox-dir "$DIR" --base-port "$BASE" --servers 3 >>"$WORK/sandbox-restart.log" 2>&1 ||
    fail "sandbox down failed" "$WORK/sandbox-restart.log"
  T "$S" sandbox up --flavor "$FLAVOR" --server-version "$VERSION" --sandbox-dir "$DIR" --base-port "$BASE" --servers 3 --buffer-pool-mb "$1" >>"$WORK/sandbox-restart.log" 2>&1 ||
    fail "sandbox up --buffer-pool-mb $1 failed" "$WORK/sandbox-restart.log"
}
# innodb_io: the three servers' summed InnoDB counters: pages read from disk,
# pages flushed, redo bytes written (one line, three numbers)
innodb_io() {
  local i r=0 fl=0 lw=0 a b c
  for i in 1 2 3; do
    read -r a b c < <(M "$i" -N -e "SELECT SUM(IF(VARIABLE_NAME = 'INNODB_BUFFER_POOL_READS', VARIABLE_VALUE, 0)),
      SUM(IF(VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_FLUSHED', VARIABLE_VALUE, 0)), SUM(IF(VARIABLE_NAME = 'INNODB_OS_LOG_WRITTEN', VARIABLE_VALUE, 0))
      FROM information_schema.GLOBAL_STATUS")
    r=$((r + a)); fl=$((fl + b)); lw=$((lw + c))
  done
  echo "$r $fl $lw"
}
# cpu_sampler FILE: the three servers' CPU ticks once a second ("epoch t1 t2 t3"), in the
# background until killed (its pid in FILE.pid)
cpu_sampler() {
  (while :; do echo "$(now) $(mariadbd_ticks)"; sleep 1; done) >"$1" 2>/dev/null &
  echo $! >"$1.pid"
}
# step_cpu LOG SAMPLES: "step CPU-seconds" of the three servers for each step of a
# shardctl log ("step started"/"step done" lines), interpolated between the samples
step_cpu() {
  grep -E 'msg="step (started|done)"' "$1" | sed -E 's/^time=([^ ]+) .*msg="step (started|done)" step=([a-z_-]+).*/\1 \2 \3/' |
    while read -r ts what step; do echo "$(date -d "$ts" +%s.%N) $what $step"; done |
    awk -v clk="$CLK" -v sf="$2" '
      BEGIN { n = 0; while ((getline l < sf) > 0) { k = split(l, a, " "); if (k < 4) continue; n++; t[n] = a[1]; v[n] = a[2] + a[3] + a[4] } }
      function at(T,   i) {
        if (n < 2 || T < t[1] || T > t[n]) return -1
        for (i = 1; i < n; i++) if (T >= t[i] && T <= t[i + 1]) return v[i] + (v[i + 1] - v[i]) * (T - t[i]) / (t[i + 1] - t[i])
        return v[n]
      }
      $2 == "started" { s[$3] = $1 }
      $2 == "done" && ($3 in s) { x = at(s[$3]); y = at($1); if (x >= 0 && y >= 0) printf "%s %.2f\n", $3, (y - x) / clk }'
}
# scale_run NAME ARGS...: one shardctl command (-o json) under /usr/bin/time -v;
# puts NAME_wall_s, NAME_rss_mb, NAME_steps, NAME_<step>_s for each step,
# NAME_plan_kb (the plan file the command wrote) and NAME_io (the servers'
# disk reads, flushed pages, redo MB while it ran)
scale_run() {
  local name=$1 out="$WORK/$1.json" t0 t1 io0 io1 plan k
  shift
  io0=$(innodb_io)
  cpu_mark "$name"
  cpu_sampler "$WORK/$name.samples"
  t0=$(now)
  /usr/bin/time -v -o "$WORK/$name.time" timeout -k 10 "$STEP_TIMEOUT" "${SC[@]}" "$@" -o json >"$out" 2>"$out.err" ||
    fail "shardctl $* exited $?" "$out.err"
  t1=$(now)
  sleep 1.1 # one more sample after the end
  kill "$(cat "$WORK/$name.samples.pid")" 2>/dev/null || true
  put "${name}_srv_cpu_s" "$(srv_cpu "$name")"
  step_cpu "$out.err" "$WORK/$name.samples" >"$WORK/$name.stepcpu" || true
  while read -r k c; do put "${name}_${k}_cpu" "$c"; done <"$WORK/$name.stepcpu"
  io1=$(innodb_io)
  put "${name}_wall_s" "$(f "$t1 - $t0")"
  put "${name}_cpu_s" "$(f "$(get "${name}_srv_cpu_s") + $(cpu_s "$WORK/$name.time")")"
  put "${name}_shardctl_cpu_s" "$(cpu_s "$WORK/$name.time")"
  put "${name}_rss_mb" "$(rss_mb "$WORK/$name.time")"
  put "${name}_io" "$(awk -v a="$io0" -v b="$io1" 'BEGIN { split(a, x, " "); split(b, y, " ")
    printf "%d pages read from disk, %d flushed, %.0f MB redo", y[1] - x[1], y[2] - x[2], (y[3] - x[3]) / 1048576 }')"
  if jq -e '.result.step_seconds' "$out" >/dev/null 2>&1; then
    put "${name}_steps" "$(jq -c '.result.step_seconds | with_entries(.value |= (. * 100 | round / 100))' "$out")"
    for k in $(jq -r '.result.step_seconds | keys[]' "$out"); do put "${name}_${k}_s" "$(f "$(jq -r ".result.step_seconds[\"$k\"]" "$out")")"; done
  fi
  plan=$(ls -t "$PLANS"/*.json 2>/dev/null | head -n 1 || true)
  [ -z "$plan" ] || put "${name}_plan_kb" "$(f "$(stat -c %s "$plan") / 1024")"
  progress "scale: $name: $(get "${name}_wall_s") s, CPU $(get "${name}_cpu_s") s (servers $(get "${name}_srv_cpu_s"), shardctl $(get "${name}_shardctl_cpu_s")), load average $(cut -d' ' -f1-3 /proc/loadavg), max RSS $(get "${name}_rss_mb") MB, steps $(get "${name}_steps"); $(get "${name}_io")"
}
# measure_scale: planning, move, split and merge of the fkcheck row's shape
# (payments -> rentals by rental_id, both sharded on emp_no, one RANGE shard)
# at SCALE_ROWS_A and SCALE_ROWS_B child rows, on servers whose buffer pool
# (SCALE_POOL_MB) holds the data: the step times side by side, per row.
measure_scale() {
  local n rows id id2 at b batch=1000000 mf t0 t1 sch got
  progress "scale: restarting the servers with a $SCALE_POOL_MB MB buffer pool"
  restart_pool "$SCALE_POOL_MB"
  if [ -n "${SCALE_REDO_MB:-}" ]; then
    for n in 1 2 3; do M "$n" -e "SET GLOBAL innodb_log_file_size = $((SCALE_REDO_MB * 1048576))"; done
  fi
  local redo=innodb_log_file_size # MySQL 9 sizes its redo log by capacity
  [ "$FLAVOR" = mysql ] && redo=innodb_redo_log_capacity
  put scale_pool "$(M 1 -N -e "SELECT @@innodb_buffer_pool_size DIV 1048576") MB buffer pool, $(M 1 -N -e "SELECT @@$redo DIV 1048576") MB redo log"
  n=0
  for rows in "$SCALE_ROWS_A" "$SCALE_ROWS_B"; do
    n=$((n + 1))
    sch="scale$n"
    mf="$WORK/map-$sch.json"
    use_map "bench_$sch"
    sc "$mf" shardmap init
    sc "$mf" shardmap add-function cust --type RANGE
    sc "$mf" shardmap add-column rentals emp_no --function cust
    sc "$mf" shardmap add-column payments emp_no --function cust
    id=$(add_shard 1 "$sch")
    sc "$mf" shardmap add-range --function cust --lower 0 --shard "$id"
    at=$((rows / 20)) # ten payments per employee: the median employee
    progress "scale: $rows payments -> $((rows / 2)) rentals in $sch on server 1 (batches of $batch, binlog off)"
    M 1 "$sch" -e "CREATE TABLE rentals (rental_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, item_id INT NOT NULL, rented DATETIME NOT NULL, KEY emp (emp_no));
      CREATE TABLE payments (payment_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, rental_id INT NULL, amount DECIMAL(5,2) NOT NULL, paid DATETIME NOT NULL,
        KEY emp (emp_no), KEY rental (rental_id), CONSTRAINT fk_payment_rental FOREIGN KEY (rental_id) REFERENCES rentals (rental_id) ON DELETE SET NULL);"
    for ((b = 0; b < rows; b += batch)); do
      local hi=$((b + batch < rows ? b + batch : rows))
      M 1 "$sch" -e "SET SESSION sql_log_bin = 0; SET foreign_key_checks = 0;
        $(echo "INSERT INTO rentals SELECT seq, seq DIV 5, seq % 1000, '2005-05-24 22:53:30' FROM seq_$((b / 2 + 1))_to_$((hi / 2));
        INSERT INTO payments SELECT seq, ((seq + 1) DIV 2) DIV 5, (seq + 1) DIV 2, 2.99, '2005-05-25 11:30:37' FROM seq_$((b + 1))_to_$hi;" | seq_sql)" >/dev/null
    done
    M 1 "$sch" -e "ANALYZE TABLE rentals, payments" >/dev/null
    put "scale${n}_size_mb" "$(M 1 -N -e "SELECT ROUND(SUM(data_length + index_length) / 1048576) FROM information_schema.TABLES WHERE table_schema = '$sch'")"
    settle 1
    # planning: a split's dry run (every planning check; the foreign key's check on the rows reads every payment)
    progress "scale: $rows rows: split --dry-run (planning)"
    cpu_mark "s${n}_plan"
    t0=$(now)
    /usr/bin/time -v -o "$WORK/s${n}_plan.time" timeout -k 10 "$STEP_TIMEOUT" "${SC[@]}" split --shard "$id" --at "$at" --to "$(addr 3)" --dry-run -o json \
      >"$WORK/s${n}-plan.json" 2>"$WORK/s${n}-plan.json.err" || fail "split --dry-run exited $?" "$WORK/s${n}-plan.json.err"
    t1=$(now)
    put "s${n}_plan_s" "$(f "$t1 - $t0")"
    put "s${n}_plan_cpu_s" "$(f "$(srv_cpu "s${n}_plan") + $(cpu_s "$WORK/s${n}_plan.time")")"
    progress "scale: $rows rows: planning $(get "s${n}_plan_s") s, CPU $(get "s${n}_plan_cpu_s") s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    put "s${n}_dry_kb" "$(f "$(stat -c %s "$WORK/s${n}-plan.json") / 1024")"
    got=$(jq -r '.key_checks[0].rows' "$WORK/s${n}-plan.json")
    [ "$got" = "$rows" ] || fail "the dry run's key check read $got child rows, not $rows" "$WORK/s${n}-plan.json"
    local ops=" ${SCALE_OPS:-move split merge} "
    settle 1
    settle 2
    if [[ "$ops" != *" move "* ]]; then M 1 -e "DROP DATABASE \`$sch\`"; continue; fi # SCALE_OPS=plan: planning alone
    progress "scale: $rows rows: move server 1 -> 2 (verify and cleanup on)"
    scale_run "s${n}_move" move --shard "$id" --to "$(addr 2)" --yes
    [ "$(jq -r .result.rows_copied "$WORK/s${n}_move.json")" = "$((rows + rows / 2))" ] ||
      fail "move copied $(jq -r .result.rows_copied "$WORK/s${n}_move.json") rows, not $((rows + rows / 2))"
    if [[ "$ops" != *" split "* ]]; then M 2 -e "DROP DATABASE \`$sch\`"; continue; fi
    settle 2
    settle 3
    progress "scale: $rows rows: split at $at, server 2 -> 3"
    scale_run "s${n}_split" split --shard "$id" --at "$at" --to "$(addr 3)" --schema "${sch}_hi" --yes
    id2=$(M 1 -N "bench_$sch" -e "SELECT shard_id FROM locations WHERE schema_name = '${sch}_hi'")
    [ -n "$id2" ] || fail "no shard ${sch}_hi in the shard map after the split"
    if [[ "$ops" != *" merge "* ]]; then M 2 -e "DROP DATABASE \`$sch\`"; M 3 -e "DROP DATABASE \`${sch}_hi\`"; continue; fi
    settle 2
    settle 3
    progress "scale: $rows rows: merge shard $id2 (server 3) into $id (server 2)"
    scale_run "s${n}_merge" merge --shard "$id2" --into "$id" --yes
    got=$(M 2 -N -e "SELECT COUNT(*) FROM \`$sch\`.payments")
    [ "$got" = "$rows" ] || fail "after the merge $sch.payments has $got rows, not $rows"
    M 2 -e "DROP DATABASE \`$sch\`"
  done
  progress "scale: restarting the servers with the bench's $POOL_MB MB buffer pool"
  restart_pool "$POOL_MB"
}

# ---------------------------------------------------------------- run

mkdir -p "$(dirname "$DIR")"
# The watchdog: a run past RUN_TIMEOUT is stopped (the cleanup takes the sandbox down).
(for ((i = 0; i < RUN_TIMEOUT; i++)); do sleep 1; done; echo "bench: stopped after $RUN_TIMEOUT s (BENCH_TIMEOUT)" >&2; kill -TERM $$) 2>/dev/null &
WATCHDOG=$!
progress "sandbox: 3 servers on ports $BASE-$((BASE + 2)) in $DIR ($MODE mode; work files in $WORK)"
"$S" sandbox down --sandbox-dir "$DIR" --base-port "$BASE" --servers 3 --purge >/dev/null 2>&1 || true
T "$S" sandbox up --flavor "$FLAVOR" --server-version "$VERSION" --sandbox-dir "$DIR" --base-port "$BASE" --servers 3 --buffer-pool-mb "$POOL_MB" >"$WORK/sandbox-up.log" 2>&1 ||
  { cat "$WORK/sandbox-up.log" >&2; exit 1; }
LOADAVG_START=$(cut -d' ' -f1-3 /proc/loadavg)

run_measure copy measure_copy
run_measure copymixed measure_copymixed
run_measure floor measure_floor
run_measure verify measure_verify
run_measure memory measure_memory
run_measure catchup measure_catchup
run_measure peer measure_peer
run_measure blackout measure_blackout
run_measure blackout_replicas measure_blackout_replicas
run_measure tenants measure_tenants
run_measure prune measure_prune
run_measure dropcost measure_dropcost
run_measure fkcheck measure_fkcheck
run_measure fleet measure_fleet
run_measure scale measure_scale

# ---------------------------------------------------------------- report

LOADAVG_END=$(cut -d' ' -f1-3 /proc/loadavg)
SERVER_INFO=$(M 1 -N -e "SELECT CONCAT('$([ "$FLAVOR" = mysql ] && echo MySQL || echo MariaDB) ', VERSION(), ' (sandbox: ', @@innodb_buffer_pool_size DIV 1048576,
  ' MB buffer pool, binlog ', @@binlog_format, '/', @@binlog_row_image, ', flush_log_at_trx_commit=', @@innodb_flush_log_at_trx_commit,
  ', sync_binlog=', @@sync_binlog, ', innodb_autoinc_lock_mode=', @@innodb_autoinc_lock_mode, ')')" 2>/dev/null || echo "$FLAVOR, unknown version")
ELAPSED=$(($(date +%s) - START))

# yes/no: met A OP B
met() { awk -v a="$1" -v b="$3" -v op="$2" 'BEGIN {
  if (a == "" || a == "n/a") { print "n/a"; exit }
  r = (op == ">=") ? (a + 0 >= b + 0) : (a + 0 <= b + 0); print (r ? "yes" : "**no**") }'; }
rps() { awk -v n="$1" -v s="$2" 'BEGIN { if (s + 0 > 0) printf "%.0fk rows/s", n / s / 1000; else print "n/a" }'; }
ms_of_ns() { awk -v n="$1" 'BEGIN { printf "%.0f", n / 1e6 }'; }
row() { printf '| %s | %s | %s | %s | %s | %s |\n' "$@"; }
K() { awk -v n="$1" 'BEGIN { if (n >= 1e6) printf "%gM", n / 1e6; else printf "%gk", n / 1e3 }'; }
failed() { [ -n "$(get "failed_$1")" ]; }
# cpu_row NOTE ROWS A B TOOL TARGET: the CPU-seconds per 1M rows of the servers
# and the client, shardctl's measurement A (A_srv_cpu_s, A_shardctl_cpu_s)
# against the reference B (B_srv_cpu_s, B_client_cpu_s, the client named TOOL)
cpu_row() {
  local m1 m2 r
  m1=$(f "($(get "$3_srv_cpu_s") + $(get "$3_shardctl_cpu_s")) * 1000000 / $2")
  m2=$(f "($(get "$4_srv_cpu_s") + $(get "$4_client_cpu_s")) * 1000000 / $2")
  r=$(div "$m2" "$m1")
  row "same, CPU-seconds per 1M rows $1" \
    "$m1 CPU-s (servers $(get "$3_srv_cpu_s"), shardctl $(get "$3_shardctl_cpu_s"))" "$m2 CPU-s (servers $(get "$4_srv_cpu_s"), $5 $(get "$4_client_cpu_s"))" "${r}×" "≥ $6×" "$(met "$r" ">=" "$6")"
}
failrow() {
  local why; why=$(get "failed_$2")
  case "$why" in "not run"*) row "$1" "$why" "" "" "$3" "—" ;; *) row "$1" "FAILED ($why)" "" "" "$3" "n/a" ;; esac
}

# scale_table: the scale row's figures, step by step, SCALE_ROWS_A against
# SCALE_ROWS_B; "per row" is (B / A) / (SCALE_ROWS_B / SCALE_ROWS_A), target ≤ 1.2
SCALE_X=$((SCALE_ROWS_B / SCALE_ROWS_A))
perrow() { awk -v a="$1" -v b="$2" -v x="$SCALE_X" 'BEGIN { if (a + 0 <= 0 || b == "" || b == "n/a") print "n/a"; else printf "%.2f", b / a / x }'; }
scale_line() { # WHAT A B [UNIT [CPU_A CPU_B]]
  local r c="" cr=""
  r=$(perrow "$2" "$3")
  if [ -n "${5:-}" ]; then c="$5 / $6"; cr=$(perrow "$5" "$6"); fi
  printf '| %s | %s%s | %s%s | %s | %s | %s | %s |\n' "$1" "$2" "${4:-}" "$3" "${4:-}" "$r" "$(met "$r" "<=" 1.2)" "${c:-—}" "${cr:-—}"
}
scale_table() {
  local op k a b
  echo "| step | $(K "$SCALE_ROWS_A") child rows | $(K "$SCALE_ROWS_B") child rows | ratio per row (($(K "$SCALE_ROWS_B")/$(K "$SCALE_ROWS_A")) / $SCALE_X) | ≤ 1.2? | servers' CPU-s, $(K "$SCALE_ROWS_A") / $(K "$SCALE_ROWS_B") | CPU ratio per row |"
  echo "|---|---|---|---|---|---|---|"
  scale_line "planning: \`split --dry-run\` wall (foreign-key check on every payment included)" "$(get s1_plan_s)" "$(get s2_plan_s)" " s"
  scale_line "planning: CPU-s (3 servers + shardctl)" "$(get s1_plan_cpu_s)" "$(get s2_plan_cpu_s)"
  for op in move split merge; do
    for k in $( { jq -r 'keys[]' <<<"$(get "s1_${op}_steps")"; jq -r 'keys[]' <<<"$(get "s2_${op}_steps")"; } 2>/dev/null | sort -u); do
      a=$(get "s1_${op}_${k}_s"); b=$(get "s2_${op}_${k}_s")
      # steps under 0.5 s at both sizes are fixed costs, not rows: shown, not judged
      if awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { exit !(a < 0.5 && b < 0.5) }'; then
        printf '| %s | %s s | %s s | — | — | — | — |\n' "$op: $k" "${a:-n/a}" "${b:-n/a}"
      else
        scale_line "$op: $k" "${a:-0}" "${b:-n/a}" " s" "$(get "s1_${op}_${k}_cpu")" "$(get "s2_${op}_${k}_cpu")"
      fi
    done
    scale_line "**$op: wall** (\`/usr/bin/time\`)" "$(get "s1_${op}_wall_s")" "$(get "s2_${op}_wall_s")" " s"
    scale_line "$op: CPU-s (3 servers + shardctl)" "$(get "s1_${op}_cpu_s")" "$(get "s2_${op}_cpu_s")"
    printf '| %s | %s MB | %s MB | %s (flat: ≤ 1.5) | — | — | — |\n' "$op: max RSS" "$(get "s1_${op}_rss_mb")" "$(get "s2_${op}_rss_mb")" "$(div "$(get "s2_${op}_rss_mb")" "$(get "s1_${op}_rss_mb")")×"
    scale_line "$op: plan file" "$(get "s1_${op}_plan_kb")" "$(get "s2_${op}_plan_kb")" " KB"
  done
}

table() {
  local c r m1 m2
  echo "| what | shardctl | reference | ratio | target | met? |"
  echo "|---|---|---|---|---|---|"
  if failed copy; then failrow "snapshot copy, $(K $COPY_ROWS) rows" copy "≥ 1.5× mydumper, ≥ 2× mysqldump"; else
    c=$(get copy_move_s)
    r=$(div "$(get mydumper_s)" "$c")
    row "snapshot copy of a $(K $COPY_ROWS)-row shard, end to end (\`move --no-verify --keep-source\` wall time) vs mydumper -t $THREADS + myloader -t $THREADS" \
      "$c s ($(rps "$COPY_ROWS" "$c"))" "$(get mydumper_s) s ($(get mydumper_dump_s) + $(get mydumper_load_s); $(rps "$COPY_ROWS" "$(get mydumper_s)"))" "${r}×" "≥ 1.5×" "$(met "$r" ">=" 1.5)"
    r=$(div "$(get dump_s)" "$c")
    row "same vs \`mysqldump --single-transaction \| mysql\`" "$c s" "$(get dump_s) s ($(rps "$COPY_ROWS" "$(get dump_s)"))" "${r}×" "≥ 2×" "$(met "$r" ">=" 2)"
    r=$(div "$(get mydumper_s)" "$(get copy_create_copy_s)")
    row "same, create + copy steps only (\`step_seconds\`)" "$(get copy_create_copy_s) s ($(rps "$COPY_ROWS" "$(get copy_create_copy_s)"))" "$(get mydumper_s) s (mydumper+myloader)" "${r}×" "≥ 1.5×" "$(met "$r" ">=" 1.5)"
    cpu_row "(all three servers + the client: \`/proc/<pid>/stat\`, \`/usr/bin/time\`; wall time swings on a loaded machine, CPU less)" \
      "$COPY_ROWS" copy mydumper mydumper+myloader 1.5
  fi
  if failed floor; then failrow "the copy's floor: LOAD DATA of the same rows from a file" floor "(info)"; else
    r=$(div "$(get floor_ai1_s)" "$(get floor_ai2_s)")
    row "the copy's floor: the copy row's $(K $COPY_ROWS) rows from a file, \`mariadb\` client's \`LOAD DATA LOCAL\` into an empty table on server 3 (binlog on, no secondary index), with the table's AUTO_INCREMENT: one session vs two at once" \
      "1 session: $(get floor_ai1_s) s, $(get floor_ai1_cpu_s) server CPU-s" "2 sessions: $(get floor_ai2_s) s, $(get floor_ai2_cpu_s) server CPU-s" "${r}× (2 vs 1)" "(info)" "—"
    r=$(div "$(get floor_plain1_s)" "$(get floor_plain2_s)")
    row "same, the table without AUTO_INCREMENT" \
      "1 session: $(get floor_plain1_s) s, $(get floor_plain1_cpu_s) server CPU-s" "2 sessions: $(get floor_plain2_s) s, $(get floor_plain2_cpu_s) server CPU-s" "${r}× (2 vs 1)" "(info)" "—"
    r=$(div "$(get floor_idx_keyed_s)" "$(get floor_idx_alter_s)")
    row "the floor of the copy's end state (the k_1 index built too), with AUTO_INCREMENT, one session: the rows, then the server's own \`ALTER TABLE … ADD KEY k_1 (k)\`, vs the rows into a table created with k_1" \
      "rows + ADD KEY: $(get floor_ai1_s) + $(get floor_alter_s) = $(get floor_idx_alter_s) s, $(get floor_idx_alter_cpu_s) server CPU-s" "created with the key: $(get floor_idx_keyed_s) s, $(get floor_idx_keyed_cpu_s) server CPU-s" "${r}× (keyed vs ADD KEY)" "(info)" "—"
  fi
  if ! failed copy && ! failed floor; then
    c=$(get copy_step_s)
    r=$(div "$c" "$(get floor_idx_s)")
    row "the copy step against its floor: the copy row's \`step_seconds.copy\` (rows and k_1) vs the floor of the same end state ($(get floor_idx_how)); the rows-only floor (1 session, no index) beside it" \
      "$c s" "$(get floor_idx_s) s (rows only: $(get floor_ai1_s) s, $(div "$c" "$(get floor_ai1_s)")×)" "${r}× the floor" "≤ 1.2×" "$(met "$r" "<=" 1.2)"
  fi
  if failed copymixed; then failrow "copy of 4 tables of mixed types, $(K $MIXED_ROWS) rows" copymixed "≥ 1.5× mydumper"; else
    c=$(get mixed_move_s)
    r=$(div "$(get mixmyd_s)" "$c")
    row "copy of 4 tables of mixed types, $(K $MIXED_ROWS) rows in all (composite key + 3 indexes; scalar types; TEXT/JSON/BLOB; narrow AUTO_INCREMENT), \`move --no-verify --keep-source\` vs mydumper -t $THREADS + myloader -t $THREADS; row counts and CHECKSUM TABLE equal on all three copies" \
      "$c s ($(rps "$MIXED_ROWS" "$c"))" "$(get mixmyd_s) s ($(get mixmyd_dump_s) + $(get mixmyd_load_s); $(rps "$MIXED_ROWS" "$(get mixmyd_s)"))$([ -z "$(get mixmyd_differs)" ] || echo '; **its copy differs from the source**, see the details')" "${r}×" "≥ 1.5×" "$(met "$r" ">=" 1.5)"
    cpu_row "(as for the sysbench copy)" "$MIXED_ROWS" mixed mixmyd mydumper+myloader 1.5
  fi
  if failed verify; then failrow "verify, $(K $VERIFY_ROWS) rows" verify "≥ 1.0× pt-table-checksum"; else
    c=$(get verify_s)
    r=$(div "$(get ptc_s)" "$c")
    row "verify of a $(K $VERIFY_ROWS)-row shard against its copy on another server (\`verify --shard --against --chunk-rows $VERIFY_CHUNK\`: both servers, $(get verify_chunks) chunks) vs \`pt-table-checksum --recursion-method=none --chunk-size $VERIFY_CHUNK --chunk-time 0\` of the same table on one server ($(get ptc_chunks) chunks)" \
      "$c s ($(rps "$VERIFY_ROWS" "$c"))" "$(get ptc_s) s ($(rps "$VERIFY_ROWS" "$(get ptc_s)"))" "${r}×" "≥ 1.0×" "$(met "$r" ">=" 1.0)"
    cpu_row "(as for the copy; shardctl reads both servers, pt-table-checksum one)" "$VERIFY_ROWS" verify ptc pt-table-checksum 1.0
  fi
  if failed catchup; then failrow "binlog catch-up" catchup "≤ T/2"; else
    r=$(div "$CATCHUP_T" "$(get catchup_s)")
    row "binlog catch-up of a backlog of T = $CATCHUP_T s of \`sysbench oltp_write_only --threads=$SB_THREADS\` ($(get catchup_tps) tps) on $(K $CATCHUP_ROWS) rows" \
      "$(get catchup_s) s (\`step_seconds.catchup\`; $(get catchup_events) events, $(awk -v e="$(get catchup_events)" -v s="$(get catchup_s)" 'BEGIN { printf "%.0fk", e / s / 1000 }')/s)" \
      "T = $CATCHUP_T s" "${r}× (T / catch-up)" "≤ T/2 (≥ 2×)" "$(met "$r" ">=" 2)"
  fi
  native_row
  peer_rows
  dropcost_row
  if failed blackout; then failrow "write blackout" blackout "≤ 200 ms worst, ≤ 100 ms median"; else
    r=$(div "$GHOST_LOCK_MS" "$(get blackout_worst_ms)")
    m=$(met "$(get blackout_worst_ms)" "<=" 200)
    [ "$(met "$(get blackout_median_ms)" "<=" 100)" = yes ] || m=$(met "$(get blackout_median_ms)" "<=" 100)
    row "write blackout on the moving keys, worst of $CUTOVERS cutovers (\`result.blackout_ms\`$([ -z "${BENCH_MAX_BLACKOUT:-}" ] || echo ", \`move --max-blackout $BENCH_MAX_BLACKOUT\`")), \`shardctl load --concurrency $LOAD_CONC --rate 0\`, a table with a counter in the shard and $BLACKOUT_TABLES tables beside it on its servers" \
      "$(get blackout_worst_ms) ms (median $(get blackout_median_ms) ms; all: $(get blackout_all))" "gh-ost lock timeout $GHOST_LOCK_MS ms" "${r}×" "≤ 200 ms worst, ≤ 100 ms median" "$m"
    row "same, longest gap between acknowledged writes on the moving keys (client side, router retries included)" \
      "$(get moving_gap_ms) ms ($(get moving_retries) retries, $(get moving_errors) errors)" "gh-ost lock timeout $GHOST_LOCK_MS ms" "$(div "$GHOST_LOCK_MS" "$(get moving_gap_ms)")×" "(info)" "—"
    row "errors on another shard (shard 4, on the server the moving shard leaves or joins) during the cutovers" \
      "$(get other_errors) errors, $(get other_retries) retries (longest gap $(get other_gap_ms) ms); ledger check: $(get ledger_check)" "—" "—" "0 errors" "$(met "$(get other_errors)" "<=" 0)"
  fi
  if failed tenants; then failrow "blackout against the tenants in the shard" tenants "largest ≤ 1.5× smallest"; else
    r=$(div "$(get "tenants_${TENANT_SIZES##* }_ms")" "$(get "tenants_${TENANT_SIZES%% *}_ms")")
    row "blackout of a 3-tenant move (\`move --keys 11,12,13 --into\`, default budget, no write load; the median of $TENANT_MOVES) out of a LIST shard of $(echo "$TENANT_SIZES" | sed 's/ /, /g') tenants into one of 300, back to back in this run" \
      "$(for n in $TENANT_SIZES; do printf '%s: %s ms (all: %s; %s attempt(s), plan %s KB); ' "$n" "$(get "tenants_${n}_ms")" "$(get "tenants_${n}_all")" "$(get "tenants_${n}_attempts")" "$(get "tenants_${n}_kb")"; done)" \
      "the smallest shard" "${r}× (largest / smallest)" "≤ 1.5×" "$(met "$r" "<=" 1.5)"
    [ "$TENANT_MERGE" -eq 0 ] || row "blackout of a merge of two LIST shards of $TENANT_MERGE tenants each (\`merge --shard 2 --into 1\`, default budget)" \
      "$(get tenants_merge_ms) ms ($(get tenants_merge_attempts) attempt(s), plan $(get tenants_merge_kb) KB)" "the 1 s budget" "—" "≤ 1000 ms" "$(case "$(get tenants_merge_ms)" in no*) echo "**no**" ;; *) met "$(get tenants_merge_ms)" "<=" 1000 ;; esac)"
  fi
  if failed blackout_replicas; then failrow "write blackout with replicas" blackout_replicas "(info)"; else
    row "same cutovers with one GTID replica under each server (\`sandbox up --replicas 1\`, a sandbox of its own without the tables beside the shard) and \`move --max-lag 1s --replica auto\`" \
      "$(get blackout_r_worst_ms) ms (median $(get blackout_r_median_ms) ms; all: $(get blackout_r_all)); ledger check: $(get ledger_check_r)" "without replicas: $(get blackout_worst_ms) ms (median $(get blackout_median_ms) ms)" "—" "(info)" "—"
  fi
  if failed prune; then failrow "prune" prune "≥ 1.0× / ≥ 3×"; else
    c=$(get prune_s)
    r=$(get prune_ratio)
    row "prune of $(K $PRUNE_ROWS) rows, chunk $PRUNE_CHUNK (\`prune --chunk-rows $PRUNE_CHUNK\`) vs \`pt-archiver --purge --limit $PRUNE_CHUNK --commit-each --bulk-delete\`, $PRUNE_ROUNDS alternating rounds (the median ratio; last round's times; all: $(get prune_rounds))" \
      "$c s ($(rps "$(get prune_deleted)" "$c"))" "$(get pt_bulk_s) s ($(rps "$(get pt_bulk_deleted)" "$(get pt_bulk_s)"))" "${r}×" "≥ 3×" "$(met "$r" ">=" 3)"
    r=$(div "$(get pt_row_s)" "$c")
    [ -n "$SMALL" ] || row "same vs pt-archiver without \`--bulk-delete\`" "$c s" "$(get pt_row_s) s ($(rps "$(get pt_row_deleted)" "$(get pt_row_s)"))" "${r}×" "≥ 3×" "$(met "$r" ">=" 3)"
  fi
  if failed fkcheck; then failrow "a split's foreign-key check on the rows" fkcheck "(info)"; else
    c=$(f "$(get fk_plan_s) - $(get fk_nokey_s)")
    r=$(div "$(get fk_join_s)" "$c")
    row "a split's planning (\`split --dry-run\`) with a foreign key without the shard key checked on the rows, $(K $FK_ROWS) child rows (Sakila's payment -> rental): the check's cost (dry run with the key minus without it) vs the same join as one statement" \
      "$c s ($(get fk_plan_s) s with the key, $(get fk_nokey_s) s without; $(rps "$FK_ROWS" "$c"))" "$(get fk_join_s) s" "${r}×" "(info; planning ≤ 5 s)" "$(met "$(get fk_plan_s)" "<=" 5)"
  fi
  if ! failed fkcheck; then
    r=$(div "$(get fk_count_s)" "$(get fk_merge_s)")
    row "a merge's planning (\`merge --dry-run\`) of two such shards ($(K $((FK_ROWS * 3 / 2))) rows each, on two servers): the collision scan of every unique key without the shard column ($(get fk_merge_scanned)) vs counting both shards' rows" \
      "$(get fk_merge_s) s" "$(get fk_count_s) s" "${r}×" "(info; planning ≤ 5 s)" "$(met "$(get fk_merge_s)" "<=" 5)"
  fi
  if failed fleet; then failrow "a fleet of $FLEET shards" fleet "seconds"; else
    row "a fleet of $FLEET small shards on 3 servers: \`status\` / \`status --exact\` / \`rebalance --dry-run\` / \`plan list\`" \
      "$(get fleet_status) s / $(get fleet_status_exact) s / $(get fleet_rebalance_dry_run_max_shard_rows_1000000) s / $(get fleet_plan_list) s" "—" "—" "seconds each" \
      "$(met "$(get fleet_status_exact)" "<=" 10)"
    if [ "$(get fleet_apply_rc)" = 0 ] && [ -z "$(get fleet_left)" ] && [ "$(get fleet_other_errors)" = 0 ] && [[ "$(get fleet_ledger)" == ok* ]] && [[ "$(get fleet_dry2)" == "exit 0, 0 proposed" ]]; then m=yes; else m="**no**"; fi
    row "same fleet given work ($FLEET_SPLIT shards over \`--max-shard-rows\`, $FLEET_COLD pairs of empty neighbours, server 1 over \`--max-server-share\`): \`rebalance --apply --concurrency 4 --same-server\` under \`shardctl load\` on a split, a moved, a merged and an untouched shard (load average $(get fleet_loadavg_apply) → $(get fleet_loadavg_after))" \
      "$(get fleet_apply_s) s, exit $(get fleet_apply_rc): $(get fleet_finished) (proposed by the dry run in $(get fleet_dry_s) s: $(get fleet_proposed)); each operation $(get fleet_op_s); worst blackout $(get fleet_blackout_worst) ms; ledger $(get fleet_ledger), checked in $(get fleet_check_s) s; second dry run $(get fleet_dry2)" \
      "—" "—" "all done, 0 errors on the untouched shard, ledger clean, nothing left" "$m"
  fi
  if failed scale; then failrow "scale: move, split, merge at $(K "$SCALE_ROWS_B") vs $(K "$SCALE_ROWS_A") rows" scale "≤ 1.2× linear per step; planning ≤ 5 s"; elif [ -z "$(get s2_move_wall_s)" ]; then
    # SCALE_OPS=plan: planning alone
    row "scale: planning (\`split --dry-run\`) of a $(K "$SCALE_ROWS_B")-row shard vs $(K "$SCALE_ROWS_A") (Sakila's payment -> rental; $(get scale_pool))" \
      "$(get s2_plan_s) s, $(get s2_plan_cpu_s) CPU-s" "$(get s1_plan_s) s, $(get s1_plan_cpu_s) CPU-s" \
      "per row: $(div "$(div "$(get s2_plan_s)" "$(get s1_plan_s)")" "$SCALE_X")×" "planning ≤ 5 s" "$(met "$(get s2_plan_s)" "<=" 5)"
  else
    c=$(for op in move split merge; do echo "$op $(div "$(div "$(get "s2_${op}_wall_s")" "$(get "s1_${op}_wall_s")")" "$SCALE_X")"; done | sort -k2 -n | tail -n 1)
    if [ "$(met "${c#* }" "<=" 1.2)" = yes ] && [ "$(met "$(get s2_plan_s)" "<=" 5)" = yes ]; then m=yes; else m="**no**"; fi
    row "scale: planning, \`move\`, \`split\`, \`merge\` of a $(K "$SCALE_ROWS_B")-row shard vs $(K "$SCALE_ROWS_A") (Sakila's payment -> rental; $(get scale_pool); per step below)" \
      "planning $(get s2_plan_s) s; move $(get s2_move_wall_s) s, split $(get s2_split_wall_s) s, merge $(get s2_merge_wall_s) s" \
      "planning $(get s1_plan_s) s; move $(get s1_move_wall_s) s, split $(get s1_split_wall_s) s, merge $(get s1_merge_wall_s) s" \
      "worst per row: ${c% *} ${c#* }×" "≤ 1.2× linear, planning ≤ 5 s" "$m"
  fi
  if failed memory; then failrow "peak memory of move" memory "flat, ≤ 150 MB"; else
    m1=$(get mem1_rss_mb); m2=$(get mem2_rss_mb)
    r=$(div "$m2" "$m1")
    if [ "$(met "$m2" "<=" 150)" = yes ] && [ "$(met "$r" "<=" 1.5)" = yes ]; then c=yes; else c="**no**"; fi
    row "peak memory (max RSS, \`/usr/bin/time -v\`) of \`move\` (verify and cleanup on): $(K "$MEM_ROWS_B") vs $(K "$MEM_ROWS_A") rows" \
      "$m2 MB at $(K "$MEM_ROWS_B") ($(get mem2_wall_s) s)" "$m1 MB at $(K "$MEM_ROWS_A") ($(get mem1_wall_s) s)" "${r}× ($(K "$MEM_ROWS_B")/$(K "$MEM_ROWS_A"))" "flat (≤ 1.5×), ≤ 150 MB" "$c"
  fi
}

{
  echo
  echo "## shardctl benchmarks ($MODE mode)"
  echo
  echo "\`scripts/bench.sh$([ -n "$SMALL" ] && echo ' --small')\`, $(date -u '+%Y-%m-%d %H:%M UTC'), shardctl $(git describe --always --dirty 2>/dev/null || echo dev), $ELAPSED s"
  echo
  table
  echo
  echo "Machine: $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)), $(free -g | awk '/^Mem:/ { print $2 " GiB RAM, " $7 " GiB available" }'), $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r); $SERVER_INFO; load average $LOADAVG_START at the start, $LOADAVG_END at the end."
  echo
  echo "Details:"
  echo
  failed copy || {
    echo "- copy: shardctl step seconds $(get copy_steps); shardctl CPU $(get copy_shardctl_cpu_s) s, max RSS $(get copy_rss_mb) MB"
    echo "- copy: during shardctl: $(get copy_cpu)"
    echo "- copy: during mysqldump | mysql: $(get dump_cpu)"
    echo "- copy: during mydumper + myloader: $(get mydumper_cpu)"
  }
  failed copymixed || {
    echo "- copymixed: shardctl step seconds $(get mixed_steps); shardctl CPU $(get mixed_shardctl_cpu_s) s, max RSS $(get mixed_rss_mb) MB; the same rows and CHECKSUM TABLE on all three copies: $(get mixed_sums)"
    echo "- copymixed: during shardctl: $(get mixed_cpu)"
    echo "- copymixed: during mydumper + myloader: $(get mixmyd_cpu)"
    [ -z "$(get mixmyd_differs)" ] || echo "- copymixed: **mydumper + myloader's copy differs from the source**: $(get mixmyd_differs)"
  }
  failed verify || {
    echo "- verify: during shardctl verify: $(get verify_cpu)"
    echo "- verify: during pt-table-checksum: $(get ptc_cpu)"
  }
  failed catchup || {
    echo "- catch-up: resume step seconds $(get catchup_steps); whole resume $(get catchup_resume_s) s; $(get catchup_tx) sysbench transactions"
    echo "- catch-up: during the resume: $(get catchup_cpu); shardctl CPU $(get catchup_shardctl_cpu_s) s"
  }
  failed blackout || {
    [ ! -s "$WORK/blackout-phases" ] || echo "- blackout: each attempt's phases in ms (\`cutover_attempts[].phases_ms\`): $(paste -sd';' "$WORK/blackout-phases" | sed 's/;/; /g')"
    echo "- blackout: seconds of each move under the load: $(get blackout_move_s)"
    echo "- blackout: $(get blackout_attempts) cutover attempts for $CUTOVERS cutovers (worst attempt $(get blackout_worst_attempt_ms) ms); load: $(get load_acked) writes acknowledged, $(get load_rate)/s"
  }
  failed tenants || echo "- tenants: each attempt's phases in ms: $(paste -sd';' "$WORK/tenants-phases" | sed 's/;/; /g')"
  failed prune || {
    echo "- prune: during shardctl: $(get prune_cpu)"
    echo "- prune: during pt-archiver --bulk-delete: $(get pt_bulk_cpu)"
    [ -n "$SMALL" ] || echo "- prune: during pt-archiver: $(get pt_row_cpu)"
  }
  failed fleet || {
    echo "- fleet: policy \`$(get fleet_policy)\`; load \`$(get fleet_load_keys) --concurrency 2 --rate 400\`: $(get fleet_load_groups)"
    echo "- fleet: blackout of each operation: $(get fleet_blackouts)"
    [ -z "$(get fleet_left)" ] || echo "- fleet: left: $(get fleet_left)"
  }
  failed memory || {
    echo "- memory: $(K "$MEM_ROWS_A") rows: step seconds $(get mem1_steps)"
    echo "- memory: $(K "$MEM_ROWS_B") rows: step seconds $(get mem2_steps)"
  }
  failed scale || {
    echo
    echo "Scale ($(get scale_pool) on every server; data: $(get scale1_size_mb) MB at $(K "$SCALE_ROWS_A") child rows, $(get scale2_size_mb) MB at $(K "$SCALE_ROWS_B")):"
    echo
    scale_table
    echo
    for op in move split merge; do
      echo "- scale: $op, the servers' InnoDB I/O while it ran: $(K "$SCALE_ROWS_A"): $(get "s1_${op}_io"); $(K "$SCALE_ROWS_B"): $(get "s2_${op}_io")"
    done
    echo "- scale: \`split --dry-run\` JSON: $(get s1_dry_kb) KB at $(K "$SCALE_ROWS_A"), $(get s2_dry_kb) KB at $(K "$SCALE_ROWS_B")"
  }
  if [ -s "$WORK/copy-top.txt" ]; then
    echo
    echo "\`top -b -n1\` during the shardctl copy:"
    echo
    echo '```'
    cat "$WORK/copy-top.txt"
    echo '```'
  fi
  echo
  echo "Work files (logs, JSON documents): $WORK"
} | tee "$WORK/report.md"

if [ ${#FAILED[@]} -gt 0 ]; then
  log "failed: ${FAILED[*]}"
  exit 1
fi
