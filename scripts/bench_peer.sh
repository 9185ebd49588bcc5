# Rows of scripts/bench.sh that measure shardctl against a peer tool and the
# server's own machinery, sourced by it (its helpers: M, T, sc, settle, ...):
#
#   peer:   `spirit move` (block/spirit) beside `shardctl move` on Oracle MySQL,
#           the same rows, alternated round by round, idle and under a steady
#           sysbench write load on the source
#   native: the catch-up row's backlog replayed a second way, by the server's
#           own parallel replication into a replica made from the same copy
#
# Environment: PEER_ROWS (1000000; 20000 with --small), PEER_SCALE_ROWS (the
# scale row's shape, payments -> rentals: 10000000; 0 = not run, the default
# with --small), PEER_ROUNDS (2; 1), PEER_RATE (sysbench transactions a
# second of the load, 300), PEER_LOADS ("idle load"), PEER_FIRST_SPIRIT (1:
# spirit goes first in the odd rounds, shardctl in the even ones; 0, the
# default, the other way round); SPIRIT_REPO (a clone of
# block/spirit, default the machine's mirror), SPIRIT_CACHE (where built
# binaries are kept, by commit), SPIRIT_BIN (a spirit binary to use instead);
# SPIRIT_GO_MYSQL (the go-mysql release spirit is built against, v1.16.0).
# Sourced, not run.

PEER_ROWS=${PEER_ROWS:-$([ -n "$SMALL" ] && echo 20000 || echo 1000000)}
PEER_SCALE_ROWS=${PEER_SCALE_ROWS:-$([ -n "$SMALL" ] && echo 0 || echo 10000000)}
PEER_ROUNDS=${PEER_ROUNDS:-$([ -n "$SMALL" ] && echo 1 || echo 2)}
PEER_RATE=${PEER_RATE:-300}
PEER_LOADS=${PEER_LOADS:-idle load}
PEER_FIRST_SPIRIT=${PEER_FIRST_SPIRIT:-0}
SPIRIT_REPO=${SPIRIT_REPO:-/work/.mirror/block+spirit/repo}
SPIRIT_CACHE=${SPIRIT_CACHE:-${TMPDIR:-/tmp}/shardctl-bench-spirit}
SPIRIT_GO_MYSQL=${SPIRIT_GO_MYSQL:-v1.16.0}
MYSQL_ROOT=${SHARDCTL_MYSQL_ROOT:-/var/lib/shardctl/mysql-root}

# extra_sandbox DIR PORT N FLAVOR [POOL_MB]: N more sandbox servers in DIR,
# from PORT on, taken down (and removed) by extra_down or by the bench's cleanup
extra_sandbox() {
  echo "$1 $2 $3" >>"$WORK/extra-sandboxes"
  T "$S" sandbox up --flavor "$4" --sandbox-dir "$1" --base-port "$2" --servers "$3" --buffer-pool-mb "${5:-$POOL_MB}" >"$WORK/sandbox-$(basename "$1").log" 2>&1 ||
    fail "sandbox up in $1 failed" "$WORK/sandbox-$(basename "$1").log"
}
extra_down() { "$S" sandbox down --sandbox-dir "$1" --base-port "$2" --servers "$3" --purge >/dev/null 2>&1 || true; }
extra_down_all() {
  local d p n
  if [ -s "$WORK/extra-pids" ]; then # the loads this file started, if still running
    while read -r p; do [ "$(cat "/proc/$p/comm" 2>/dev/null)" != sysbench ] || kill -KILL "$p" 2>/dev/null || true; done <"$WORK/extra-pids"
  fi
  [ -s "$WORK/extra-sandboxes" ] || return 0
  while read -r d p n; do extra_down "$d" "$p" "$n"; done <"$WORK/extra-sandboxes"
}

# spirit_build: prints the path of a spirit binary built from SPIRIT_REPO's
# HEAD, once per commit (SPIRIT_CACHE/COMMIT/spirit), or says why not and
# fails. Its generated parser is not stored with the source: built with its
# own goyacc as its Makefile does; its go.mod names an unreleased go-mysql
# the module proxy does not serve: replaced by SPIRIT_GO_MYSQL.
spirit_build() {
  local commit out src
  if [ -n "${SPIRIT_BIN:-}" ]; then echo "$SPIRIT_BIN"; return 0; fi
  [ -d "$SPIRIT_REPO" ] || { echo "bench: no block/spirit repository at $SPIRIT_REPO (SPIRIT_REPO: a clone of it)" >&2; return 1; }
  commit=$(git -C "$SPIRIT_REPO" rev-parse HEAD 2>/dev/null) || { echo "bench: $SPIRIT_REPO is not a git repository" >&2; return 1; }
  out="$SPIRIT_CACHE/$commit/spirit"
  if [ -x "$out" ]; then echo "$out"; return 0; fi
  # Building spirit takes 3-13 minutes on 2 cores: more than the smoke run's
  # whole bound. The smoke run uses a built one and builds none.
  if [ -n "${SMALL:-}" ] && [ "${BENCH_BUILD_SPIRIT:-}" != 1 ]; then
    echo "bench: spirit $commit is not built yet and --small does not build it (a few minutes): run 'BENCH_ONLY=peer scripts/bench.sh --small' with BENCH_BUILD_SPIRIT=1 once" >&2
    return 1
  fi
  src="$SPIRIT_CACHE/$commit/src"
  rm -rf "$src"
  mkdir -p "$src"
  {
    git clone -q --no-checkout "$SPIRIT_REPO" "$src" &&
      # a stored copy may lack its largest file, the generated parser, which is made below
      { git -C "$src" checkout -q HEAD -- . 2>/dev/null || true; } &&
      [ -f "$src/go.mod" ] && [ -f "$src/pkg/parser/parser.y" ] &&
      T go build -C "$src/pkg/parser/goyacc" -o ../bin/goyacc . &&
      (cd "$src/pkg/parser" && T bin/goyacc -o parser.go -p yy -t Parser parser.y >/dev/null && rm -f y.output) &&
      (cd "$src" && go mod edit -replace "github.com/go-mysql-org/go-mysql=github.com/go-mysql-org/go-mysql@$SPIRIT_GO_MYSQL" &&
        T go mod tidy && T go build -o "$out" ./cmd/spirit)
  } >"$SPIRIT_CACHE/$commit/build.log" 2>&1 || {
    echo "bench: spirit ($commit) could not be built (offline, or its module graph changed): $SPIRIT_CACHE/$commit/build.log" >&2
    tail -n 5 "$SPIRIT_CACHE/$commit/build.log" | sed 's/^/    /' >&2
    return 1
  }
  echo "$out"
}

# peer_servers: the servers of the peer row: the bench's own on MySQL; on
# MariaDB (spirit refuses it) two MySQL servers of its own, when the MySQL
# root is built (it is not built for this row: that takes minutes)
peer_servers() {
  [ "$FLAVOR" = mysql ] && return 0
  [ -x "$MYSQL_ROOT/usr/sbin/mysqld" ] || { echo "bench: peer: spirit runs on MySQL only, and no MySQL root is built at $MYSQL_ROOT (BENCH_FLAVOR=mysql builds it)" >&2; return 1; }
  BASE=$((BASE + 10))
  DIR="$DIR-peer"
  FLAVOR=mysql
  PIDFILE=mysqld.pid
  CONF="$DIR/shardctl.yaml"
  progress "peer: 2 MySQL servers of its own on ports $BASE-$((BASE + 1))"
  extra_sandbox "$DIR" "$BASE" 2 mysql
}

# peer_load_start SCHEMA / peer_load_stop NAME: the steady write load on the
# source during one tool's run (both tools get the same rate); its achieved
# rate is put as NAME_tps. Errors are ignored: the source stops taking writes
# at each tool's cutover (shardctl's fence, spirit's rename).
peer_load_start() {
  if [ "$1" = scpeer ]; then
    # The scale shape has no sysbench table: the same kind of transaction
    # (two updates, a delete and an insert) on its payments and rentals.
    peer_scale_lua >"$WORK/peer-scale-load.lua"
    PEER_SCALE_N=$PEER_N sysbench "$WORK/peer-scale-load.lua" --mysql-host=127.0.0.1 --mysql-port="$(port 1)" \
      --mysql-user="$DBUSER" --mysql-password="$DBPASS" --mysql-db="$1" --threads=4 --rate="$PEER_RATE" --time=3600 \
      --mysql-ignore-errors=all --report-interval=1 run >"$WORK/peer-load.log" 2>&1 &
  else
    # shellcheck disable=SC2046
    sysbench oltp_write_only $(sysbench_args 1 "$1" "$PEER_N") --threads=4 --rate="$PEER_RATE" --time=3600 \
      --mysql-ignore-errors=all --report-interval=1 run >"$WORK/peer-load.log" 2>&1 &
  fi
  PEER_LOAD=$!
  echo "$PEER_LOAD" >>"$WORK/extra-pids"
  sleep 2 # the load is running when the tool starts
}
# peer_scale_lua: the sysbench script of the scale shape's write load
# (PEER_SCALE_N payments, half as many rentals).
peer_scale_lua() {
  cat <<'LUA'
local n = tonumber(os.getenv("PEER_SCALE_N"))
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
end
function event()
  local p = sysbench.rand.uniform(1, n)
  local r = sysbench.rand.uniform(1, math.floor(n / 2))
  local rental = math.floor((p + 1) / 2)
  con:query("BEGIN")
  con:query("UPDATE payments SET amount = amount + 0.01 WHERE payment_id = " .. p)
  con:query("UPDATE rentals SET item_id = item_id + 1 WHERE rental_id = " .. r)
  con:query("DELETE FROM payments WHERE payment_id = " .. p)
  con:query("INSERT INTO payments VALUES (" .. p .. ", " .. math.floor(rental / 5) .. ", " .. rental .. ", 2.99, '2005-05-25 11:30:37')")
  con:query("COMMIT")
end
LUA
}
peer_load_stop() {
  [ -n "${PEER_LOAD:-}" ] || return 0
  kill -KILL "$PEER_LOAD" 2>/dev/null || true
  wait "$PEER_LOAD" 2>/dev/null || true
  PEER_LOAD=""
  # the mean of its per-second reports (a killed sysbench prints no summary)
  put "$1_tps" "$(sed -n 's/.* tps: \([0-9.]*\).*/\1/p' "$WORK/peer-load.log" | awk '{ s += $1 } END { if (NR) printf "%.0f", s / NR }')"
  if [ -z "$(get "$1_tps")" ]; then # a run "under load" without a load must not read as one
    put "$1_tps" "none: the load did not run ($(grep -m1 FATAL "$WORK/peer-load.log" | cut -c1-120))"
    progress "peer: $1: the write load did not run: $(grep -m1 FATAL "$WORK/peer-load.log")"
  fi
}

# peer_done NAME T0: one tool's run has ended: the load stopped; puts
# NAME_s (since T0), NAME_srv_cpu_s, NAME_tool_cpu_s, NAME_rss_mb
peer_done() {
  local t1
  t1=$(now)
  peer_load_stop "$1"
  put "$1_srv_cpu_s" "$(srv_cpu "$1")"
  put "$1_tool_cpu_s" "$(cpu_s "$WORK/$1.time")"
  put "$1_rss_mb" "$(rss_mb "$WORK/$1.time")"
  put "$1_s" "$(f "$t1 - $2")"
}

# peer_shardctl NAME SCHEMA ROUND: `move --keep-source` (verify on) of SCHEMA,
# server 1 -> 2; puts NAME_s, NAME_cutover_s (start to the end of the cutover
# step), NAME_catchup_s, NAME_verify_s, NAME_srv_cpu_s, NAME_tool_cpu_s,
# NAME_rss_mb, NAME_blackout_ms; then undoes it (target dropped, source unfenced)
peer_shardctl() {
  local name=$1 sch=$2 id t0 j="$WORK/$1.json"
  use_map "bench_peer_$3"
  sc "$WORK/$name-map.json" shardmap init
  sc "$WORK/$name-map.json" shardmap add-function sb --type RANGE
  if [ "$sch" = sbpeer ]; then
    sc "$WORK/$name-map.json" shardmap add-column sbtest1 id --function sb
  else
    sc "$WORK/$name-map.json" shardmap add-column rentals emp_no --function sb
    sc "$WORK/$name-map.json" shardmap add-column payments emp_no --function sb
  fi
  sc "$WORK/$name-shard.json" shardmap add-shard --server "$(addr 1)" --schema "$sch"
  id=$(jq -r .shard_id "$WORK/$name-shard.json")
  add_range 0 "$id"
  settle 1
  settle 2
  [ "$PEER_LOAD_ON" = 1 ] && peer_load_start "$sch"
  cpu_mark "$name"
  t0=$(now)
  /usr/bin/time -v -o "$WORK/$name.time" timeout -k 10 "$STEP_TIMEOUT" "${SC[@]}" move --shard "$id" --to "$(addr 2)" --yes -o json --keep-source \
    >"$j" 2>"$j.err" || { peer_load_stop "$name"; fail "shardctl move exited $?" "$j.err"; }
  peer_done "$name" "$t0"
  put "${name}_cutover_s" "$(f "$(jq -r '[.result.step_seconds | to_entries[] | select(.key != "cleanup") | .value] | add' "$j")")"
  put "${name}_catchup_s" "$(f "$(jq -r '.result.step_seconds.catchup // 0' "$j")")"
  put "${name}_verify_s" "$(f "$(jq -r '.result.step_seconds.verify // 0' "$j")")"
  put "${name}_copy_s" "$(f "$(jq -r '.result.step_seconds.copy // 0' "$j")")"
  put "${name}_blackout_ms" "$(jq -r '.result.blackout_ms // "n/a"' "$j")"
  progress "peer: $name: shardctl $(get "${name}_s") s ($(get "${name}_cutover_s") s to the end of its cutover; copy $(get "${name}_copy_s") s, catch-up $(get "${name}_catchup_s") s, verify $(get "${name}_verify_s") s; blackout $(get "${name}_blackout_ms") ms), servers $(get "${name}_srv_cpu_s") CPU-s, shardctl $(get "${name}_tool_cpu_s") CPU-s, $(get "${name}_rss_mb") MB; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  M 2 -e "DROP DATABASE IF EXISTS \`$sch\`"
  peer_unfence "$sch"
  M 1 -e "DROP DATABASE IF EXISTS \`bench_peer_$3\`"
}
# peer_unfence SCHEMA: the source as it was before a --keep-source move
# (its fence triggers dropped)
peer_unfence() {
  local t
  for t in $(M 1 -N -e "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = '$1'"); do
    M 1 -e "DROP TRIGGER \`$1\`.\`$t\`"
  done
}

# peer_spirit NAME SCHEMA: `spirit move` of SCHEMA, server 1 -> SCHEMA_spirit
# on server 2, with its defaults; puts the same figures as peer_shardctl (its
# cutover and catch-up read from its log), then undoes it (target dropped,
# the source's tables renamed back from <name>_old)
peer_spirit() {
  local name=$1 sch=$2 t0 dsn="$DBUSER:$DBPASS@tcp(127.0.0.1" l="$WORK/$1.log" t rc=0
  M 2 -e "DROP DATABASE IF EXISTS \`${sch}_spirit\`; CREATE DATABASE \`${sch}_spirit\`"
  settle 1
  settle 2
  [ "$PEER_LOAD_ON" = 1 ] && peer_load_start "$sch"
  cpu_mark "$name"
  t0=$(now)
  # its log has whole seconds: each line is stamped as it comes (EPOCHREALTIME)
  /usr/bin/time -v -o "$WORK/$name.time" timeout -k 10 "$STEP_TIMEOUT" "$SPIRIT" move \
    --source-dsn "$dsn:$(port 1))/$sch" --target-dsn "$dsn:$(port 2))/${sch}_spirit" 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done >"$l" || rc=$?
  [ "$rc" = 0 ] || { peer_load_stop "$name"; fail "spirit move exited $rc" "$l"; }
  peer_done "$name" "$t0"
  # seconds from the start to the first log line matching a pattern
  at() { awk -v t0="$t0" -v re="$1" '$0 ~ re { printf "%.2f", $1 - t0; exit }' "$l"; }
  put "${name}_copied_s" "$(at 'All tables copied')"
  put "${name}_checksum_s" "$(at 'starting distributed checksum')"
  put "${name}_checksum_done_s" "$(at 'checksum passed')"
  put "${name}_cutover_s" "$(at 'final cut over operation complete')"
  progress "peer: $name: spirit $(get "${name}_s") s (cutover at $(get "${name}_cutover_s") s; rows copied at $(get "${name}_copied_s") s, checksum $(get "${name}_checksum_s")-$(get "${name}_checksum_done_s") s), servers $(get "${name}_srv_cpu_s") CPU-s, spirit $(get "${name}_tool_cpu_s") CPU-s, $(get "${name}_rss_mb") MB; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  M 2 -e "DROP DATABASE IF EXISTS \`${sch}_spirit\`"
  for t in $(M 1 -N -e "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '$sch' AND TABLE_NAME LIKE '%\\_old'"); do
    M 1 -e "RENAME TABLE \`$sch\`.\`$t\` TO \`$sch\`.\`${t%_old}\`"
  done
  M 1 -N -e "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '$sch' AND TABLE_NAME LIKE '\\_spirit%'" |
    while read -r t; do M 1 -e "DROP TABLE \`$sch\`.\`$t\`"; done
}

# peer_scale_data SCHEMA ROWS: the scale row's shape (ROWS payments -> ROWS/2
# rentals by rental_id, both with emp_no) on server 1, binlog off
peer_scale_data() {
  local b batch=1000000 hi
  M 1 -e "DROP DATABASE IF EXISTS \`$1\`; CREATE DATABASE \`$1\`"
  M 1 "$1" -e "CREATE TABLE rentals (rental_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, item_id INT NOT NULL, rented DATETIME NOT NULL, KEY emp (emp_no));
    CREATE TABLE payments (payment_id INT NOT NULL PRIMARY KEY, emp_no INT NOT NULL, rental_id INT NULL, amount DECIMAL(5,2) NOT NULL, paid DATETIME NOT NULL,
      KEY emp (emp_no), KEY rental (rental_id))"
  for ((b = 0; b < $2; b += batch)); do
    hi=$((b + batch < $2 ? b + batch : $2))
    M 1 "$1" -e "SET SESSION sql_log_bin = 0;
      $(echo "INSERT INTO rentals SELECT seq, seq DIV 5, seq % 1000, '2005-05-24 22:53:30' FROM seq_$((b / 2 + 1))_to_$((hi / 2));
      INSERT INTO payments SELECT seq, ((seq + 1) DIV 2) DIV 5, (seq + 1) DIV 2, 2.99, '2005-05-25 11:30:37' FROM seq_$((b + 1))_to_$hi;" | seq_sql)" >/dev/null
  done
  M 1 "$1" -e "ANALYZE TABLE rentals, payments" >/dev/null
}

# measure_peer: spirit move beside shardctl move, alternated (which goes
# first alternates round by round), at PEER_ROWS sysbench rows and at
# PEER_SCALE_ROWS of the scale row's shape, idle and under the write load
measure_peer() {
  local commit size sch load r a b
  SPIRIT=$(spirit_build) || return 1
  commit=$(basename "$(dirname "$SPIRIT")")
  [ -n "${SPIRIT_BIN:-}" ] && commit="(SPIRIT_BIN=$SPIRIT_BIN)"
  put peer_spirit_commit "$commit"
  progress "peer: spirit built from block/spirit $commit ($SPIRIT)"
  peer_servers || return 1
  put peer_server "$(M 1 -N -e "SELECT VERSION()")"
  for size in "$PEER_ROWS" "$PEER_SCALE_ROWS"; do
    [ "$size" -gt 0 ] || continue
    if [ "$size" = "$PEER_ROWS" ]; then
      sch=sbpeer
      progress "peer: sysbench prepare $size rows on server 1"
      M 1 -e "DROP DATABASE IF EXISTS sbpeer"
      prepare 1 sbpeer "$size"
    else
      sch=scpeer
      progress "peer: the scale row's shape, $size payments -> $((size / 2)) rentals on server 1"
      peer_scale_data scpeer "$size"
    fi
    PEER_N=$size
    for load in $PEER_LOADS; do
      PEER_LOAD_ON=0
      [ "$load" = load ] && PEER_LOAD_ON=1
      for ((r = 1; r <= PEER_ROUNDS; r++)); do
        a="peer_${sch}_${load}_${r}"
        if [ $(((r + PEER_FIRST_SPIRIT) % 2)) = 1 ]; then
          peer_shardctl "${a}_sc" "$sch" "$r"
          peer_spirit "${a}_sp" "$sch"
        else
          peer_spirit "${a}_sp" "$sch"
          peer_shardctl "${a}_sc" "$sch" "$r"
        fi
      done
    done
    M 1 -e "DROP DATABASE IF EXISTS \`$sch\`"
  done
  if [ "$FLAVOR" = mysql ] && [ "$DIR" != "${SHARDCTL_BENCH_DIR:-${TMPDIR:-/tmp}/shardctl-bench}" ]; then extra_down "$DIR" "$BASE" 2; fi
}

# peer_rows: the peer row's lines of the report table (one per size and load)
peer_rows() {
  local size sch load r m what sc sp scx spx note
  if failed peer; then failrow "\`spirit move\` beside \`shardctl move\` (MySQL)" peer "≥ 2× spirit"; return 0; fi
  for size in "$PEER_ROWS" "$PEER_SCALE_ROWS"; do
    [ "$size" -gt 0 ] || continue
    if [ "$size" = "$PEER_ROWS" ]; then sch=sbpeer; what="$(K "$size")-row sysbench table"; else sch=scpeer; what="the scale row's shape, $(K "$size") payments + $(K $((size / 2))) rentals"; fi
    for load in $PEER_LOADS; do
      sc=""; sp=""; scx=""; spx=""
      for ((r = 1; r <= PEER_ROUNDS; r++)); do
        local k="peer_${sch}_${load}_${r}"
        sc+="${sc:+, }$(get "${k}_sc_s")"; sp+="${sp:+, }$(get "${k}_sp_s")"
        scx+="${scx:+; }cutover at $(get "${k}_sc_cutover_s") s, catch-up $(get "${k}_sc_catchup_s") s, verify $(get "${k}_sc_verify_s") s, blackout $(get "${k}_sc_blackout_ms") ms, $(get "${k}_sc_srv_cpu_s") + $(get "${k}_sc_tool_cpu_s") CPU-s, $(get "${k}_sc_rss_mb") MB"
        spx+="${spx:+; }cutover at $(get "${k}_sp_cutover_s") s (rows copied at $(get "${k}_sp_copied_s") s, checksum $(get "${k}_sp_checksum_s")–$(get "${k}_sp_checksum_done_s") s), $(get "${k}_sp_srv_cpu_s") + $(get "${k}_sp_tool_cpu_s") CPU-s, $(get "${k}_sp_rss_mb") MB"
      done
      note=""
      local tool="sysbench oltp_write_only"
      [ "$sch" = scpeer ] && tool="sysbench peer-scale-load.lua (oltp_write_only's transaction on payments and rentals)"
      [ "$load" = load ] && note=" under \`$tool --rate=$PEER_RATE --threads=4\` on the source (achieved: shardctl's runs $(get "peer_${sch}_load_1_sc_tps") tps, spirit's $(get "peer_${sch}_load_1_sp_tps") tps)"
      r=$(awk -v a="$sc" -v b="$sp" 'BEGIN { n = split(a, x, ", "); split(b, y, ", "); s = ""; for (i = 1; i <= n; i++) { if (x[i] + 0 > 0) s = s (s == "" ? "" : ", ") sprintf("%.2f", y[i] / x[i]) } print s == "" ? "n/a" : s }')
      # the cell's figure: spirit's median time over shardctl's (each tool's
      # runs spread 10-30% between rounds; one slow round is not the cell)
      m=$(div "$(median "$sp")" "$(median "$sc")")
      row "peer: \`shardctl move --keep-source\` (verify on) vs \`spirit move\` (defaults, block/spirit $(get peer_spirit_commit | cut -c1-12)), $what, $(get peer_server), wall time, $PEER_ROUNDS alternated round(s)$note" \
        "$sc s ($scx)" "$sp s ($spx)" "${r}× (medians: ${m}×)" "≥ 2× (medians)" "$(met "$m" ">=" 2)"
    done
  done
}

# ---------------------------------------------------------------- native replication

# native_prepare SCHEMA: before the catch-up row's backlog: a replica of the
# source made from the same copy (a 4th server of its own, SCHEMA dumped into
# it with the source still), at the source's GTID position, stopped, parallel
# apply set (MariaDB: slave_parallel_threads=4, optimistic; MySQL:
# replica_parallel_workers=4, WRITESET where the version has the setting)
NATIVE_PORT=$((BASE + 3))
NATIVE_DIR="$DIR-native"
NM() { T mariadb --no-defaults -h127.0.0.1 -P"$NATIVE_PORT" -u"$DBUSER" -p"$DBPASS" "$@"; }
native_prepare() {
  local sch=$1 pos
  extra_sandbox "$NATIVE_DIR" "$NATIVE_PORT" 1 "$FLAVOR"
  NM -e "SET GLOBAL server_id = 104"
  if [ "$FLAVOR" = mysql ]; then pos=$(M 1 -N -e "SELECT @@GLOBAL.gtid_executed" | tr -d '\n'); else pos=$(M 1 -N -e "SELECT @@GLOBAL.gtid_binlog_pos"); fi
  T mysqldump --no-defaults -h127.0.0.1 -P"$(port 1)" -u"$DBUSER" -p"$DBPASS" --single-transaction --skip-triggers --databases "$sch" \
    2>"$WORK/native-dump.err" | NM --init-command="SET SESSION sql_log_bin = 0" || fail "the replica's copy of $sch failed" "$WORK/native-dump.err"
  if [ "$FLAVOR" = mysql ]; then
    [ "$(M 1 -N -e "SELECT @@GLOBAL.gtid_executed" | tr -d '\n')" = "$pos" ] || fail "the source was written during the replica's copy"
    # the replica's own GTIDs go; it starts where the source's copy was taken
    NM -e "RESET BINARY LOGS AND GTIDS; SET GLOBAL gtid_purged = '$pos';
      CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = $(port 1), SOURCE_USER = '$DBUSER', SOURCE_PASSWORD = '$DBPASS', SOURCE_AUTO_POSITION = 1, GET_SOURCE_PUBLIC_KEY = 1;
      CHANGE REPLICATION FILTER REPLICATE_DO_DB = ($sch);
      SET GLOBAL replica_parallel_workers = 4, replica_preserve_commit_order = ON"
    # MySQL 8.0 computes WRITESET dependencies when told to (on the source); 8.4 and later always do
    if [ -n "$(M 1 -N -e "SHOW GLOBAL VARIABLES LIKE 'binlog_transaction_dependency_tracking'")" ]; then
      M 1 -e "SET GLOBAL binlog_transaction_dependency_tracking = WRITESET"
    fi
    put native_settings "replica_parallel_workers=4, replica_preserve_commit_order=ON, $( [ -n "$(M 1 -N -e "SHOW GLOBAL VARIABLES LIKE 'binlog_transaction_dependency_tracking'")" ] && echo "binlog_transaction_dependency_tracking=WRITESET" || echo "WRITESET dependencies (the only kind since 8.4)")"
  else
    [ "$(M 1 -N -e "SELECT @@GLOBAL.gtid_binlog_pos")" = "$pos" ] || fail "the source was written during the replica's copy"
    NM -e "SET GLOBAL gtid_slave_pos = '$pos';
      CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = $(port 1), MASTER_USER = '$DBUSER', MASTER_PASSWORD = '$DBPASS', MASTER_USE_GTID = slave_pos;
      SET GLOBAL replicate_do_db = '$sch', slave_parallel_threads = 4, slave_parallel_mode = optimistic"
    put native_settings "slave_parallel_threads=4, slave_parallel_mode=optimistic"
  fi
}

# native_replay SCHEMA GTIDPOS: after the backlog (and shardctl's replay of
# it): the replica started (receiver and applier at once, as shardctl reads
# and applies at once), timed until it has applied GTIDPOS, the source's
# position at the backlog's end: puts native_s
native_replay() {
  local target=$2 t0 t1
  cpu_mark native
  t0=$(now)
  native_start ""
  native_wait_applied "$target"
  t1=$(now)
  put native_cpu "$(cpu_report native)"
  put native_s "$(f "$t1 - $t0")"
  put native_rows "$(NM -N -e "SELECT COUNT(*) FROM \`$1\`.sbtest1")"
  progress "catch-up: the server's own replication replayed the backlog in $(get native_s) s ($(get native_settings))"
  extra_down "$NATIVE_DIR" "$NATIVE_PORT" 1
}
# native_start [IO_THREAD|SQL_THREAD]: START REPLICA (SLAVE) on the replica
native_start() { if [ "$FLAVOR" = mysql ]; then NM -e "START REPLICA $1"; else NM -e "START SLAVE $1"; fi; }
# native_wait_applied GTIDPOS: until the replica has applied GTIDPOS (bounded)
native_wait_applied() {
  local ok
  if [ "$FLAVOR" = mysql ]; then
    ok=$(NM -N -e "SELECT WAIT_FOR_EXECUTED_GTID_SET('$1', $STEP_TIMEOUT)")
  else
    ok=$(NM -N -e "SELECT MASTER_GTID_WAIT('$1', $STEP_TIMEOUT)")
  fi
  [ "$ok" = 0 ] || { NM -e "SHOW REPLICA STATUS\G" >"$WORK/native-status.txt" 2>&1; fail "the replica did not reach $1 (wait returned $ok)" "$WORK/native-status.txt"; }
}
# source_gtid: the source's GTID position now (native_replay's target)
source_gtid() { if [ "$FLAVOR" = mysql ]; then M 1 -N -e "SELECT @@GLOBAL.gtid_executed" | tr -d '\n'; else M 1 -N -e "SELECT @@GLOBAL.gtid_binlog_pos"; fi; }

# native_row: the catch-up row's line against native replication
native_row() {
  failed catchup && return 0
  [ -n "$(get native_s)" ] || { row "catch-up vs the server's own parallel replication" "not measured: $(get native_why)" "" "" "≥ 1.0×" "n/a"; return 0; }
  local r
  r=$(div "$(get native_s)" "$(get catchup_s)")
  row "same backlog replayed by the server's own replication into a replica made from the same copy ($(get native_settings)), started after the backlog, until it has applied the source's position at the backlog's end" \
    "$(get catchup_s) s (\`step_seconds.catchup\`)" "$(get native_s) s" "${r}× (replica / shardctl)" "≥ 1.0×" "$(met "$r" ">=" 1.0)"
}

# native STEP ARGS...: one of the native-replication steps, whose failure is
# reported in the catch-up row (native_why) and does not stop the row
native() {
  local rc
  set +e
  (set -e; "$@")
  rc=$?
  set -e
  [ $rc = 0 ] || put native_why "$1 failed (exit $rc), see $WORK"
  return $rc
}

# ---------------------------------------------------------------- the cost of a DROP

# drop_load_start / drop_load_stop NAME: a point-select and write load
# (sysbench oltp_read_write, DROP_THREADS sessions, each as fast as its
# transactions return: a fixed --rate queues behind a machine slower than
# that rate and then reports its queue, not the server) on another schema of
# the source, its p99 latency reported each second; puts NAME_p99 (the worst
# second's), NAME_p99s (every second's) and NAME_tps
DROP_ROWS=${DROP_ROWS:-$([ -n "$SMALL" ] && echo 30000 || echo 1000000)}
# With --small one session and a 1 s baseline: its closed loop takes a core
# for as long as it runs, and the smoke test runs beside CI's e2e tests.
DROP_THREADS=${DROP_THREADS:-$([ -n "$SMALL" ] && echo 1 || echo 2)}
DROP_BASE_S=${DROP_BASE_S:-$([ -n "$SMALL" ] && echo 1 || echo 5)}
drop_load_start() {
  # shellcheck disable=SC2046
  sysbench oltp_read_write $(sysbench_args 1 sbdrop_load 10000) --threads="$DROP_THREADS" --time=3600 --percentile=99 \
    --report-interval=1 --mysql-ignore-errors=all run >"$WORK/drop-load.log" 2>&1 &
  DROP_LOAD=$!
  echo "$DROP_LOAD" >>"$WORK/extra-pids"
  sleep 2.5 # two whole seconds of the load before the operation
}
drop_load_stop() {
  sleep 1.5 # and one after it
  kill -KILL "$DROP_LOAD" 2>/dev/null || true
  wait "$DROP_LOAD" 2>/dev/null || true
  # "[ 3s ] thds: 4 tps: 199.9 qps: ... lat (ms,99%): 12.08 err/s: 0.00 ..."
  put "$1_p99s" "$(sed -n 's/.*lat (ms,99%): \([0-9.]*\).*/\1/p' "$WORK/drop-load.log" | paste -sd' ')"
  put "$1_p99" "$(sed -n 's/.*lat (ms,99%): \([0-9.]*\).*/\1/p' "$WORK/drop-load.log" | sort -n | tail -n 1)"
  put "$1_tps" "$(sed -n 's/.* tps: \([0-9.]*\).*/\1/p' "$WORK/drop-load.log" | awk '{ s += $1 } END { if (NR) printf "%.0f", s / NR }')"
  cp "$WORK/drop-load.log" "$WORK/drop-load-$1.log"
}

# measure_dropcost: what the cleanup of a whole-shard move costs the source's
# other traffic, its chunked deletes (`prune`, the cleanup's own code) against
# a plain DROP DATABASE of the same DROP_ROWS rows (hot in the buffer pool, as
# a source that served the shard until its cutover), under the same load
measure_dropcost() {
  local a b t0 t1
  use_map bench_drop
  sb_map drop
  a=$(add_shard 1 sbdrop)
  b=$(add_shard 2 sbdrop_owner)
  add_range -1000000 "$a" # shard A owns no sysbench row: prune deletes them all
  add_range 1 "$b"
  progress "dropcost: sysbench prepare $DROP_ROWS rows, and 10000 for the load"
  prepare 1 sbdrop_src "$DROP_ROWS"
  prepare 1 sbdrop_load 10000
  drop_copy() {
    M 1 -e "DROP DATABASE IF EXISTS sbdrop; CREATE DATABASE sbdrop; CREATE TABLE sbdrop.sbtest1 LIKE sbdrop_src.sbtest1;
      INSERT INTO sbdrop.sbtest1 SELECT * FROM sbdrop_src.sbtest1"
    settle 1
  }
  settle 1
  progress "dropcost: the load alone"
  drop_load_start
  sleep "$DROP_BASE_S"
  drop_load_stop drop_base
  drop_copy
  progress "dropcost: shardctl prune --chunk-rows $PRUNE_CHUNK (the cleanup's chunked deletes) of $DROP_ROWS rows under the load, then DROP DATABASE of the empty schema"
  drop_load_start
  t0=$(now)
  sc "$WORK/drop-prune.json" prune --shard "$a" --chunk-rows "$PRUNE_CHUNK"
  M 1 -e "DROP DATABASE sbdrop"
  t1=$(now)
  drop_load_stop drop_chunked
  put drop_chunked_s "$(f "$t1 - $t0")"
  drop_copy
  progress "dropcost: DROP DATABASE of $DROP_ROWS rows under the load"
  drop_load_start
  t0=$(now)
  M 1 -e "DROP DATABASE sbdrop"
  t1=$(now)
  drop_load_stop drop_drop
  put drop_drop_s "$(f "$t1 - $t0")"
  progress "dropcost: p99 of the load: alone $(get drop_base_p99) ms (worst second), chunked deletes $(get drop_chunked_s) s with $(get drop_chunked_p99) ms, DROP $(get drop_drop_s) s with $(get drop_drop_p99) ms"
  M 1 -e "DROP DATABASE sbdrop_src; DROP DATABASE sbdrop_load"
}

dropcost_row() {
  if failed dropcost; then failrow "cleanup of a whole-shard move: DROP vs chunked deletes" dropcost "(info)"; return 0; fi
  row "cleanup of a whole-shard move, $(K "$DROP_ROWS") rows: the source's other traffic (\`sysbench oltp_read_write --threads=$DROP_THREADS\` on another schema, closed loop; p99 latency of each second, the worst; alone: $(get drop_base_p99) ms, $(get drop_base_tps) tps) during \`DROP DATABASE\` vs during the chunked deletes (\`prune --chunk-rows $PRUNE_CHUNK\`) and the drop of the emptied schema" \
    "DROP: $(get drop_drop_s) s, worst p99 $(get drop_drop_p99) ms (each second: $(get drop_drop_p99s))" \
    "chunked: $(get drop_chunked_s) s, worst p99 $(get drop_chunked_p99) ms (each second: $(get drop_chunked_p99s))" \
    "$(div "$(get drop_chunked_p99)" "$(get drop_drop_p99)")× (p99, chunked / DROP)" "(info: DROP where it does not stall)" "—"
}
