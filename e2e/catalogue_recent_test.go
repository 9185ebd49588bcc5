package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
)

// recentRefusals are the catalogue's cases for refusals of user input added
// since 2026-11-26 that need a fleet of their own: a move across flavors
// whose table the other flavor cannot take, the abort of a plan whose
// switch committed unacknowledged, and --replica auto beside a binlog reader
// that never registered. It returns the cases, the clusters they run on
// (catState reads them too), and a check for what catState cannot see (the
// other flavor's server), to run after the cases.
func recentRefusals(t *testing.T, c *cluster) ([]badCase, []*cluster, func()) {
	t.Helper()
	s3 := c.env.Addr(3).String()
	var cases []badCase

	// A move whose switch committed but whose acknowledgement was lost
	// (exit 3, the shard fenced at its source): an abort would lift the
	// fence and remove the copy the map serves.
	ac := newCluster(t, "e2e_cata", []int{1}, []int{60})
	if r := ac.run([]string{"SHARDCTL_FAULT=fail:cutover:ack"}, "move", "--shard", "1", "--to", s3, "--yes", "--max-blackout", "2s", "--retry-for", "0"); r.code != 3 {
		t.Fatalf("the move whose switch was not acknowledged: exit %d, want 3:\n%s", r.code, r.stderr)
	}
	aid := planID(planFiles(t, ac.planDir)[0])
	cases = append(cases, badCase{args: []string{"plan", "abort", aid}, c: ac, code: 2, hint: "finish it with 'shardctl plan resume " + aid + "'"})

	// A table the other flavor cannot take: refused at planning, by name.
	other := testenv.OtherFlavor(t)
	xc := newCluster(t, "e2e_catx", []int{2}, []int{60})
	table, hint := "(emp_no INT NOT NULL PRIMARY KEY, addr INET6 NULL)", "table hosts column `addr`"
	if testenv.MySQL() {
		table, hint = "(emp_no INT NOT NULL PRIMARY KEY, name VARCHAR(20), KEY lower_name ((LOWER(name))))", "table hosts index `lower_name`"
	}
	if _, err := xc.db(2).Exec("CREATE TABLE " + dbutil.Table(xc.shards[0].Schema, "hosts") + " " + table); err != nil {
		t.Fatal(err)
	}
	to := other.Addr(1).String()
	cases = append(cases,
		badCase{args: []string{"move", "--shard", "1", "--to", to, "--dry-run"}, c: xc, code: 2, hint: hint},
		badCase{args: []string{"move", "--shard", "1", "--to", to, "--yes"}, c: xc, code: 2, hint: hint},
	)

	// A binlog reader on server 1 that never registered (mysqlbinlog): with
	// --replica auto the replicas cannot all be told, so the move is refused.
	startUnregisteredReader(t, c.env.Addr(1))
	cases = append(cases,
		badCase{args: []string{"move", "--shard", "1", "--to", s3, "--replica", "auto", "--max-lag", "1s", "--yes"}, code: 2, hint: "name the replicas with --replica HOST:PORT instead of auto"},
	)

	// Issue 53, on a LIST map: a split without --keys is told to give
	// them; --min-shard-rows, which does not merge LIST shards, is an unmet
	// limit naming the merge to run; a key move into a shard set offline
	// is refused with the online it needs. A malformed --metrics-addr is
	// refused by a dry run as by a run.
	lc := newClusterSeed(t, "e2e_catl", []int{1, 2, 1}, sandbox.SeedConfig{Sizes: []int{30, 30, 30}, List: true})
	lc.mustRun("shardmap", "set-status", "--shard", "3", "offline")
	tenant := fmt.Sprint(lc.shards[0].Lower + 1)
	cases = append(cases,
		badCase{args: []string{"split", "--shard", "1", "--to", s3, "--dry-run"}, c: lc, code: 2, hint: "give --keys K1,K2 (the tenants that move", not: "one range or ring point"},
		badCase{args: []string{"split", "--shard", "1", "--to", s3, "--yes"}, c: lc, code: 2, hint: "give --keys K1,K2 (the tenants that move", not: "one range or ring point"},
		badCase{args: []string{"rebalance", "--min-shard-rows", "1000000"}, c: lc, code: 2, hint: "does not merge LIST shards (which two is a choice about their tenants): merge them by hand: shardctl merge --shard"},
		badCase{args: []string{"rebalance", "--min-shard-rows", "1000000", "--apply"}, c: lc, code: 2, hint: "nothing could be done"},
		badCase{args: []string{"move", "--shard", "1", "--keys", tenant, "--into", "3", "--dry-run"}, c: lc, code: 2, hint: "bring the shard online first ('shardctl shardmap set-status --shard 3 online')"},
		badCase{args: []string{"move", "--shard", "3", "--keys", fmt.Sprint(lc.shards[2].Lower + 1), "--into", "1", "--yes"}, c: lc, code: 2, hint: "shard 3's mapping"},
		badCase{args: []string{"move", "--shard", "1", "--to", s3, "--dry-run", "--metrics-addr", "nonsense"}, code: 2, hint: "--metrics-addr \"nonsense\""},
		badCase{args: []string{"move", "--shard", "1", "--to", s3, "--yes", "--metrics-addr", "nonsense"}, code: 2, hint: "--metrics-addr \"nonsense\""},
		badCase{args: []string{"status", "--metrics-addr", "127.0.0.1:http"}, code: 2, hint: "give HOST:PORT or :PORT"},
	)

	check := func() {
		if schemaExists(t, openAt(t, other.Addr(1)), xc.shards[0].Schema) {
			t.Errorf("the refused move across flavors created %s on %s", xc.shards[0].Schema, to)
		}
	}
	return cases, []*cluster{ac, xc, lc}, check
}

// startUnregisteredReader runs the flavor's mysqlbinlog against addr until
// the test ends, and waits for its binlog dump thread.
func startUnregisteredReader(t *testing.T, addr dbutil.Addr) {
	t.Helper()
	db := openAt(t, addr)
	files, err := binlog.BinaryLogs(context.Background(), db)
	if err != nil || len(files) == 0 {
		t.Fatalf("binary logs of %s: %v %v", addr, files, err)
	}
	testenv.BinlogReader(t, addr, files[0])
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if dumpThreads(t, db) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no binlog dump thread on %s after starting mysqlbinlog", addr)
		}
	}
}

func dumpThreads(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// plansRows is the plans table of c's sharding database (none yet: empty).
func plansRows(t *testing.T, c *cluster) string {
	t.Helper()
	rows, err := c.store.DB.Query("SELECT id, revision, state, SHA2(document, 256) FROM " + dbutil.Table(c.name, "plans") + " ORDER BY id")
	if dbutil.ErrNumber(err) == 1146 {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, state, sum string
		var rev int64
		if err := rows.Scan(&id, &rev, &state, &sum); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "\nplans row %s %d %s %s", id, rev, state, sum)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// replicaTargetRefusals are issue 53's catalogue cases that need a GTID
// replica (f's replica 1 of its primary, where c's shard 1 lives): a replica
// as any operation's target is refused at planning (--dry-run too) and at
// --yes, exit 2, naming its source, with nothing changed. A whole-shard
// move to a replica of the shard's own server meets the shard's replicated
// copy there, which the refusal must never advise dropping. A second
// cluster, whose shard 2 was put on the replica by hand, is a merge's and
// an --into's target there. They run through the catalogue's runner on
// both flavors (the catalogue itself runs in one pass only: these
// replicate).
func replicaTargetRefusals(t *testing.T, c *cluster, f *testenv.Fleet) {
	t.Helper()
	replica, primary := f.Replica(1).String(), f.Primary().String()
	on := newClusterAt(t, c.name+"t", []dbutil.Addr{c.env.Addr(1), f.Replica(1)}, []int{30, 30}, false)
	lo := c.shards[0].Lower
	is := "is a replica of " + primary
	cases := []badCase{
		{args: []string{"move", "--shard", "1", "--to", replica, "--dry-run"}, code: 2, hint: "the target server " + replica + " " + is, not: "drop it"},
		{args: []string{"move", "--shard", "1", "--to", replica, "--yes"}, code: 2, hint: is, not: "drop it"},
		{args: []string{"split", "--shard", "1", "--at", fmt.Sprint(lo + 30), "--to", replica, "--dry-run"}, code: 2, hint: is},
		{args: []string{"split", "--shard", "1", "--at", fmt.Sprint(lo + 30), "--to", replica, "--yes"}, code: 2, hint: is},
		{args: []string{"move", "--shard", "1", "--range", fmt.Sprintf("%d:%d", lo+5, lo+10), "--to", replica, "--yes"}, code: 2, hint: is},
		{args: []string{"move", "--shard", "1", "--to", replica, "--dry-run"}, c: on, code: 2, hint: is},
		{args: []string{"merge", "--shard", "1", "--into", "2", "--dry-run"}, c: on, code: 2, hint: is},
		{args: []string{"move", "--shard", "1", "--range", fmt.Sprintf("%d:%d", on.shards[0].Lower+5, on.shards[0].Lower+10), "--into", "2", "--yes"}, c: on, code: 2, hint: is},
	}
	pdb, rdb := openAt(t, f.Primary()), openAt(t, f.Replica(1))
	like := strings.ReplaceAll(c.name, "_", "\\_") + "%"
	state := func() string {
		s := clusterState(t, like, c, on)
		var b strings.Builder
		schemaState(t, &b, "primary", pdb, like)
		schemaState(t, &b, "replica", rdb, like)
		return s + b.String()
	}
	// The shard's replicated copy on the replica is the live shard's data.
	protected := []string{replica + "/" + c.shards[0].Schema}
	runBadCases(t, c, cases, []*cluster{c, on}, state, protected)
}
