package fence_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var ctx = context.Background()

// exec runs a statement or fails the test.
var exec = testenv.Exec

// A range fence rejects writes to the fenced keys with 1290, lets other keys
// and other schemas through, lets the bypass session through, and lifts cleanly.
func TestRangeFence(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	exec(t, db, "DROP DATABASE IF EXISTS fence_a")
	exec(t, db, "DROP DATABASE IF EXISTS fence_b")
	for _, s := range []string{"fence_a", "fence_b"} {
		exec(t, db, "CREATE DATABASE "+s)
		exec(t, db, "CREATE TABLE "+s+".t (id INT PRIMARY KEY, v VARCHAR(10))")
		exec(t, db, "INSERT INTO "+s+".t VALUES (1,'a'),(150,'b'),(250,'c')")
	}
	lo, hi := keyspace.IntK(100), keyspace.IntK(200)
	f := keyspace.Filter{Column: "id", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}
	var before string
	db.QueryRow("SHOW MASTER STATUS").Scan(&before, new(any), new(any), new(any))
	if err := fence.Install(ctx, db, "fence_a", []fence.Table{{Name: "t", Filter: f}}, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := fence.Install(ctx, db, "fence_a", []fence.Table{{Name: "t", Filter: f}}, time.Second); err != nil {
		t.Fatal("install again:", err)
	}
	fenced := []string{
		"INSERT INTO fence_a.t VALUES (160, 'x')",
		"UPDATE fence_a.t SET v = 'y' WHERE id = 150",
		"UPDATE fence_a.t SET id = 170 WHERE id = 1",  // moving a row into the range
		"UPDATE fence_a.t SET id = 20 WHERE id = 150", // moving a row out of it
		"DELETE FROM fence_a.t WHERE id = 150",
	}
	for _, q := range fenced {
		_, err := db.Exec(q)
		if dbutil.ErrNumber(err) != fence.ErrNumber {
			t.Errorf("%s: err %v, want 1290", q, err)
		}
	}
	for _, q := range []string{"INSERT INTO fence_a.t VALUES (5, 'ok')", "UPDATE fence_a.t SET v = 'ok' WHERE id = 250", "UPDATE fence_b.t SET v = 'ok' WHERE id = 150"} {
		if _, err := db.Exec(q); err != nil {
			t.Errorf("%s: %v (must pass the fence)", q, err)
		}
	}
	conn, _ := db.Conn(ctx)
	if _, err := conn.ExecContext(ctx, fence.BypassSQL); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "DELETE FROM fence_a.t WHERE id = 150"); err != nil {
		t.Errorf("bypass session blocked: %v", err)
	}
	conn.Close()
	names, _ := fence.Installed(ctx, db, "fence_a")
	if len(names) != 3 {
		t.Fatalf("installed %v", names)
	}
	if err := fence.Remove(ctx, db, "fence_a", []string{"t"}, time.Second); err != nil {
		t.Fatal(err)
	}
	if names, _ := fence.Installed(ctx, db, "fence_a"); len(names) != 0 {
		t.Fatalf("left %v", names)
	}
	exec(t, db, "INSERT INTO fence_a.t VALUES (160, 'free')")
}

// A transaction that already wrote to the table holds its metadata lock: the
// fence waits for it only as long as lock_wait_timeout, then fails, so the caller can retry.
func TestFenceDoesNotPileUpBehindOpenTransaction(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	exec(t, db, "DROP DATABASE IF EXISTS fence_c")
	exec(t, db, "CREATE DATABASE fence_c")
	exec(t, db, "CREATE TABLE fence_c.t (id INT PRIMARY KEY)")
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO fence_c.t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = fence.Install(ctx, db, "fence_c", []fence.Table{{Name: "t"}}, time.Second)
	if err == nil {
		t.Fatal("fence installed while a writer held the table")
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("fence waited %s", time.Since(start))
	}
	tx.Commit()
	if err := fence.Install(ctx, db, "fence_c", []fence.Table{{Name: "t"}}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO fence_c.t VALUES (2)"); dbutil.ErrNumber(err) != 1290 {
		t.Fatalf("whole-table fence: %v", err)
	}
}

// Sessions opened ahead of the blackout install the same fence.
func TestFenceOnSessionsOpenedAhead(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	tablesAB(t, db, "fence_s")
	ts := []fence.Table{{Name: "a"}, {Name: "b"}}
	s, err := fence.OpenSessions(ctx, db, len(ts), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Install(ctx, "fence_s", ts, time.Second); err != nil {
		t.Fatal(err)
	}
	if got, err := fence.Installed(ctx, db, "fence_s"); err != nil || len(got) != 6 {
		t.Fatalf("installed %v %v, want 6 triggers", got, err)
	}
	if _, err := db.Exec("INSERT INTO fence_s.b VALUES (1)"); dbutil.ErrNumber(err) != fence.ErrNumber {
		t.Fatalf("write through the fence: %v", err)
	}
	if err := s.Install(ctx, "fence_s", append(ts, fence.Table{Name: "c"}), time.Second); err == nil {
		t.Fatal("more tables than sessions should be refused")
	}
	if err := fence.Remove(ctx, db, "fence_s", []string{"a", "b"}, time.Second); err != nil {
		t.Fatal(err)
	}
	if got, _ := fence.Installed(ctx, db, "fence_s"); len(got) != 0 {
		t.Fatalf("left %v", got)
	}
}

// An armed fence: triggers in place let writes through until the fence row
// is set; a transaction that wrote a covered row holds the fencing UPDATE
// off until it ends; Remove lifts it and leaves neither triggers nor table.
func TestArmedFence(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	tablesAB(t, db, "fence_arm")
	lo, hi := keyspace.IntK(100), keyspace.IntK(200)
	ts := []fence.Table{{Name: "a", Filter: keyspace.Filter{Column: "id", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}}, {Name: "b"}}
	s, err := fence.OpenSessions(ctx, db, len(ts), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Arm(ctx, "fence_arm", ts, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Arm(ctx, "fence_arm", ts, 2*time.Second); err != nil {
		t.Fatal("arm again:", err)
	}
	if got, _ := fence.Installed(ctx, db, "fence_arm"); len(got) != 6 {
		t.Fatalf("armed %v, want 6 triggers", got)
	}
	exec(t, db, "INSERT INTO fence_arm.a VALUES (150), (5)") // armed, not fenced
	fences(t, db, "fence_arm", "a", false)
	// A transaction that wrote a covered row holds the fence off.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO fence_arm.b VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctx, "fence_arm", 300*time.Millisecond); !fence.IsTimeout(err) {
		t.Fatalf("fence behind an open writer: %v, want a timeout", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctx, "fence_arm", time.Second); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"INSERT INTO fence_arm.a VALUES (160)", "UPDATE fence_arm.a SET id = 170 WHERE id = 5", "DELETE FROM fence_arm.b WHERE id = 1"} {
		if _, err := db.Exec(q); dbutil.ErrNumber(err) != fence.ErrNumber {
			t.Errorf("%s: err %v, want 1290", q, err)
		}
	}
	if _, err := db.Exec("INSERT INTO fence_arm.a VALUES (6)"); err != nil {
		t.Errorf("a row outside the fence: %v", err)
	}
	fences(t, db, "fence_arm", "a", true)
	// Arming again (the next attempt) clears the row: the fence is lifted.
	if err := s.Arm(ctx, "fence_arm", ts, time.Second); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "INSERT INTO fence_arm.a VALUES (161)")
	fences(t, db, "fence_arm", "a", false)
	if err := s.Fence(ctx, "fence_arm", time.Second); err != nil {
		t.Fatal(err)
	}
	// Removing b's triggers clears the row (a armed, unfenced); plain
	// triggers (Install) on b fence, and Install sets the row for a's.
	if err := fence.Remove(ctx, db, "fence_arm", []string{"b"}, time.Second); err != nil {
		t.Fatal(err)
	}
	fences(t, db, "fence_arm", "a", false)
	fences(t, db, "fence_arm", "b", false)
	if err := fence.Install(ctx, db, "fence_arm", ts[1:], time.Second); err != nil {
		t.Fatal(err)
	}
	fences(t, db, "fence_arm", "a", true)
	fences(t, db, "fence_arm", "b", true)
	if err := fence.Remove(ctx, db, "fence_arm", []string{"a", "b"}, time.Second); err != nil {
		t.Fatal(err)
	}
	if got, _ := fence.Installed(ctx, db, "fence_arm"); len(got) != 0 {
		t.Fatalf("left %v", got)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'fence_arm' AND TABLE_NAME = ?", dbutil.FenceTable).Scan(&n); err != nil || n != 0 {
		t.Fatalf("fence table left: %d %v", n, err)
	}
	exec(t, db, "INSERT INTO fence_arm.a VALUES (162)")
	fences(t, db, "fence_arm", "a", false)
}

// fences asserts what fence.Fences reports for schema.table.
func fences(t *testing.T, db *sql.DB, schema, table string, want bool) {
	t.Helper()
	if got, err := fence.Fences(ctx, db, schema, table); err != nil || got != want {
		t.Fatalf("fence.Fences(%s.%s) = %v (%v), want %v", schema, table, got, err, want)
	}
}

// tablesAB makes schema afresh with two tables, a and b, dropped at the end.
func tablesAB(t *testing.T, db *sql.DB, schema string) {
	t.Helper()
	exec(t, db, "DROP DATABASE IF EXISTS "+schema)
	exec(t, db, "CREATE DATABASE "+schema)
	t.Cleanup(func() { _, _ = db.Exec("DROP DATABASE IF EXISTS " + schema) })
	exec(t, db, "CREATE TABLE "+schema+".a (id INT PRIMARY KEY)")
	exec(t, db, "CREATE TABLE "+schema+".b (id INT PRIMARY KEY)")
}
