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

func exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	q = testenv.SQL(q)
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

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
	exec(t, db, "DROP DATABASE IF EXISTS fence_s")
	exec(t, db, "CREATE DATABASE fence_s")
	t.Cleanup(func() { _, _ = db.Exec("DROP DATABASE IF EXISTS fence_s") })
	exec(t, db, "CREATE TABLE fence_s.a (id INT PRIMARY KEY)")
	exec(t, db, "CREATE TABLE fence_s.b (id INT PRIMARY KEY)")
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
