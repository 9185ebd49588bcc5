package e2e

import (
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/sandbox"
)

// TestFailoverResumesByGTID: a move tails a primary that has an asynchronous
// replica; the primary dies mid-tail, the replica is promoted, and
// 'plan resume --source REPLICA' continues the tail there by GTID and cuts
// over, with the ledger of writes before and after the failover clean.
func TestFailoverResumesByGTID(t *testing.T) {
	env := testenv.Get(t)
	fo, primary, replica, pdb, rdb := primaryReplica(t)

	c := newClusterAt(t, "e2e_failover", []dbutil.Addr{primary}, []int{300}, false)
	waitReplicated(t, pdb, rdb)

	postpone, lp, move, path := heldMove(t, c, env.Addr(2).String())
	waitReplicated(t, pdb, rdb) // writes acknowledged by the primary are on the replica
	// Let the tail checkpoint what it applied, then the primary dies and the
	// move with it (an operator's kill, or its own exit when the source is gone).
	time.Sleep(1500 * time.Millisecond)
	if err := sandbox.Kill(fo, 1); err != nil {
		t.Fatal(err)
	}
	_ = move.Process.Kill()
	_ = move.Wait()

	p, err := plans.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Checkpoints.Applied.GTID == "" && p.Checkpoints.Start.GTID == "" {
		t.Fatalf("the plan's checkpoints carry no GTID set: %+v", p.Checkpoints)
	}
	promote(t, rdb)

	// Resume on the promoted replica, with writes going on (they reach it
	// through the shard map once the plan re-points the shard's location).
	lp2 := c.startLoadBlocked(100, c.keys("after", 1, 1000))
	if err := os.Remove(postpone); err != nil {
		t.Fatal(err)
	}
	r := c.run(nil, "plan", "resume", p.ID, "--source", replica.String())
	lp2.stop(t)
	if r.code != 0 {
		t.Fatalf("resume on the promoted replica: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := m.Location(1); l.Addr() != env.Addr(2) {
		t.Errorf("shard 1 is at %s, want the target %s", l.Addr(), env.Addr(2))
	}
	c.checkLedger(lp)
	c.checkLedger(lp2)
	if !strings.Contains(r.stderr, "by GTID") {
		t.Errorf("the resume did not say it continued by GTID:\n%s", r.stderr)
	}
}

func openAt(t *testing.T, a dbutil.Addr) *sql.DB {
	t.Helper()
	db, err := dbutil.Open(ctx, a, sandbox.Creds(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitReplicated waits until the replica holds every GTID the primary has.
func waitReplicated(t *testing.T, pdb, rdb *sql.DB) {
	t.Helper()
	f, err := dbutil.FlavorOf(ctx, pdb)
	if err != nil {
		t.Fatal(err)
	}
	q := "SELECT @@global.gtid_executed"
	if !f.MySQL {
		q = "SELECT @@global.gtid_binlog_pos" // the replica writes the primary's GTIDs with log_slave_updates
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var want, have string
		if err := pdb.QueryRow(q).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if err := rdb.QueryRow(q).Scan(&have); err != nil {
			t.Fatal(err)
		}
		if ok, err := binlog.GTIDContains(f.Name(), have, want); err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not catch up within 60s: primary %s, replica %s", want, have)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promote turns the replica into a primary as an operator would: stop
// replication, forget the source, make it writable.
func promote(t *testing.T, rdb *sql.DB) {
	t.Helper()
	stmts := []string{"STOP SLAVE", "RESET SLAVE ALL"}
	if testenv.MySQL() {
		stmts = []string{"STOP REPLICA", "RESET REPLICA ALL"}
	}
	for _, s := range stmts {
		if _, err := rdb.Exec(s); err != nil {
			t.Fatalf("promote the replica (%s): %v", s, err)
		}
	}
	setReadOnly(t, rdb, false)
}

// waitPlanStep waits for the only plan in dir to finish step and returns its path.
func waitPlanStep(t *testing.T, dir, step string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) == 1 {
			if p, err := plans.Load(files[0]); err == nil && p.Done(step) {
				return files[0]
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the plan in %s did not finish step %s within 2 minutes", dir, step)
	return ""
}

// primaryReplica starts a fleet of a primary and its asynchronous GTID replica.
func primaryReplica(t *testing.T) (fo sandbox.Config, primary, replica dbutil.Addr, pdb, rdb *sql.DB) {
	t.Helper()
	f := testenv.Replicated(t, 1)
	primary, replica = f.Primary(), f.Replica(1)
	return f.Config, primary, replica, openAt(t, primary), openAt(t, replica)
}

// TestFailoverRefusedWhenReplicaLacksApplied: the replica stopped
// replicating before the move, so the target applied writes the promoted
// replica never got. 'plan resume --source REPLICA' must refuse (exit 2,
// naming both GTID sets) instead of resuming and keeping rows the new
// source lacks. SHARDCTL_FAULT=short:gtid-wait shortens the 30 s wait.
func TestFailoverRefusedWhenReplicaLacksApplied(t *testing.T) {
	env := testenv.Get(t)
	fo, primary, replica, pdb, rdb := primaryReplica(t)
	c := newClusterAt(t, "e2e_failover_lag", []dbutil.Addr{primary}, []int{300}, false)
	waitReplicated(t, pdb, rdb)
	stop := "STOP SLAVE"
	if testenv.MySQL() {
		stop = "STOP REPLICA"
	}
	if _, err := rdb.Exec(stop); err != nil {
		t.Fatal(err)
	}
	_, _, move, path := heldMove(t, c, env.Addr(2).String())
	time.Sleep(1500 * time.Millisecond) // and checkpoints them
	if err := sandbox.Kill(fo, 1); err != nil {
		t.Fatal(err)
	}
	_ = move.Process.Kill()
	_ = move.Wait()
	p, err := plans.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	promote(t, rdb)
	r := c.run([]string{"SHARDCTL_FAULT=short:gtid-wait"}, "plan", "resume", p.ID, "--source", replica.String())
	if r.code != 2 || !strings.Contains(r.stderr, "lacks transactions the target already applied") {
		t.Fatalf("resume on a replica that lacks applied transactions: exit %d, want 2 naming the GTID sets\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("refused: %s", lastLines(r.stderr, 1))
}

// heldMove starts a move of shard 1 to "to" that holds before its cutover
// (postpone file) while the load writes 100 tx/s, and returns once the move
// verified and the tail applied some of those writes (the load is stopped).
func heldMove(t *testing.T, c *cluster, to string) (postpone string, lp *loadProc, move *exec.Cmd, path string) {
	t.Helper()
	postpone = filepath.Join(c.dir, "postpone")
	if err := os.WriteFile(postpone, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	lp = c.startLoad(100, c.keys("before", 1, 300))
	move = c.command(nil, "move", "--shard", "1", "--to", to, "--yes", "--postpone-cutover-file", postpone)
	if err := move.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = move.Process.Kill() })
	path = waitPlanStep(t, c.planDir, plans.StepVerify)
	time.Sleep(time.Second) // the tail applies some of the load's writes
	lp.stop(t)
	return postpone, lp, move, path
}

// TestRepointRefusesUncheckedSource: 'plan resume --source' with a server
// that holds a copy of the schema but is no replica of the source (a row
// missing), and with a server of the other flavor, is refused with exit 2
// before the shard map changes: the map, the plan file and the plans table's
// copy are as before, and the plan still runs to the end on its source.
func TestRepointRefusesUncheckedSource(t *testing.T) {
	env := testenv.Get(t)
	c := newCluster(t, "e2e_repoint", []int{1}, []int{200})
	postpone, _, move, path := heldMove(t, c, env.Addr(2).String())
	time.Sleep(1500 * time.Millisecond) // the tail checkpoints what it applied
	_ = move.Process.Kill()
	_ = move.Wait()
	p, err := plans.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	schema := c.shards[0].Schema
	copySchemaButOneRow(t, c.db(1), c.db(3), schema)

	other := otherFlavorServer(t)
	unchanged := c.stateOf(p.ID, path)
	for _, cand := range []struct{ addr, want string }{
		{env.Addr(3).String(), "lacks transactions the target already applied"},
		{other.String(), "runs the same kind of server"},
	} {
		r := c.run([]string{"SHARDCTL_FAULT=short:gtid-wait"}, "plan", "resume", p.ID, "--source", cand.addr)
		if r.code != 2 || !strings.Contains(r.stderr, cand.want) {
			t.Fatalf("resume --source %s: exit %d, want 2 saying %q\n%s\n%s", cand.addr, r.code, cand.want, r.stdout, r.stderr)
		}
		if got := c.stateOf(p.ID, path); got != unchanged {
			t.Fatalf("resume --source %s was refused but changed the shard map, the plan file or the plans table:\nbefore %s\nafter  %s", cand.addr, unchanged, got)
		}
		t.Logf("refused: %s", lastLines(r.stderr, 1))
	}
	if err := os.Remove(postpone); err != nil {
		t.Fatal(err)
	}
	if r := c.run(nil, "plan", "resume", p.ID); r.code != 0 {
		t.Fatalf("resume on the plan's own source after the refusals: exit %d\n%s", r.code, r.stderr)
	}
}

// stateOf is the shard map, plan file and plans-table row of plan id, for
// comparing before and after a refused run.
func (c *cluster) stateOf(id, path string) string {
	c.t.Helper()
	var row string
	err := c.db(1).QueryRow("SELECT CONCAT(revision, '/', state, '/', document) FROM "+dbutil.Table(c.name, "plans")+" WHERE id = ?", id).Scan(&row)
	if err != nil && err != sql.ErrNoRows {
		c.t.Fatal(err)
	}
	return c.mapJSON() + "\n" + readAll(c.t, path) + "\n" + row
}

// copySchemaButOneRow creates schema on dst with src's tables and rows, less
// the first row of employees: a copy that is no replica of src.
func copySchemaButOneRow(t *testing.T, src, dst *sql.DB, schema string) {
	t.Helper()
	conn, err := dst.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	q := dbutil.QuoteIdent(schema)
	for _, s := range []string{"SET SESSION foreign_key_checks = 0", "DROP DATABASE IF EXISTS " + q, "CREATE DATABASE " + q, "USE " + q} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range queryStrings(t, src, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE'", schema) {
		var name, ddl string
		if err := src.QueryRow("SHOW CREATE TABLE "+dbutil.Table(schema, tb)).Scan(&name, &ddl); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
		rs, err := src.Query("SELECT * FROM " + dbutil.Table(schema, tb))
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rs.Columns()
		skip := tb == "employees"
		for rs.Next() {
			vals := make([]any, len(cols))
			for i := range vals {
				vals[i] = new(sql.NullString)
			}
			if err := rs.Scan(vals...); err != nil {
				t.Fatal(err)
			}
			if skip {
				skip = false
				continue
			}
			marks := strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ")
			if _, err := conn.ExecContext(ctx, "INSERT INTO "+dbutil.QuoteIdent(tb)+" VALUES ("+marks+")", vals...); err != nil {
				t.Fatal(err)
			}
		}
		rs.Close()
	}
}

// otherFlavorServer is the test binary's server of the flavor the tests do not run.
func otherFlavorServer(t *testing.T) dbutil.Addr {
	t.Helper()
	return testenv.OtherFlavor(t).Addr(1)
}
