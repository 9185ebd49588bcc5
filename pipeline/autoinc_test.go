package pipeline

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
)

// The source issued ids it no longer holds (the highest rows deleted, an
// insert rolled back); the target got only the rows. carryAutoIncrement
// raises the target's counter past every id the source issued, leaves a
// higher counter alone, and does nothing the second time.
func TestCarryAutoIncrement(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	src, dst := env.DB(t, 1, ""), env.DB(t, 2, "")
	ddl := []string{"CREATE TABLE t (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)",
		"CREATE TABLE high (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)",
		"CREATE TABLE plain (id INT NOT NULL PRIMARY KEY)"}
	testenv.Schema(t, src, "ai_src", ddl...)
	testenv.Schema(t, dst, "ai_dst", ddl...)
	testenv.InSchema(t, src, "ai_src", "INSERT INTO t (v) VALUES (1),(2),(3)", "INSERT INTO high (v) VALUES (1)")
	// MySQL caches information_schema.TABLES: read it once so a stale cache would show.
	if _, err := autoIncrements(ctx, src, "ai_src", []string{"t"}); err != nil {
		t.Fatal(err)
	}
	cachedQ := "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'ai_src' AND TABLE_NAME = 't'"
	var cached uint64
	if err := src.QueryRow(cachedQ).Scan(&cached); err != nil {
		t.Fatal(err)
	}
	testenv.InSchema(t, src, "ai_src",
		"INSERT INTO t (id, v) VALUES (1000, 4)", "DELETE FROM t WHERE id = 1000",
		"BEGIN", "INSERT INTO t (v) VALUES (5)", "ROLLBACK")
	testenv.InSchema(t, dst, "ai_dst", "INSERT INTO high (id, v) VALUES (5000, 1)")
	// The copy: the rows, with their ids.
	rows := testenv.Dump(t, src, "SELECT id, v FROM ai_src.t ORDER BY id")
	if len(rows) != 3 {
		t.Fatalf("source rows %v", rows)
	}
	testenv.InSchema(t, dst, "ai_dst", "INSERT INTO t (id, v) VALUES (1,1),(2,2),(3,3)")
	if err := src.QueryRow(cachedQ).Scan(&cached); err != nil { // after the changes: stale on MySQL
		t.Fatal(err)
	}
	live, err := autoIncrements(ctx, src, "ai_src", []string{"high", "t"})
	if err != nil {
		t.Fatal(err)
	}
	if live["t"] != 1002 {
		t.Fatalf("live counter of the source: %d, want 1002 (information_schema without the session setting said %d)", live["t"], cached)
	}
	if cols, err := counterColumns(ctx, src, "ai_src"); err != nil || len(cols) != 2 || cols["t"].Max != 1<<63-1 || cols["high"].Max != 1<<31-1 {
		t.Fatalf("tables with an AUTO_INCREMENT column: %v (%v), want t (BIGINT) and high (INT)", cols, err)
	}
	start := time.Now()
	raised, floor, err := carryAutoIncrement(ctx, src, "ai_src", dst, "ai_dst", []string{"high", "t"}, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: carried the counters in %s (one ALTER); information_schema.TABLES without the session setting said %d, live %d",
		testenv.Flavor(), time.Since(start), cached, live["t"])
	if !slices.Equal(raised, []string{"t"}) || floor["t"] != 1002 || floor["high"] != 5001 {
		t.Fatalf("raised %v, want [t] (high's target counter is higher already); the target's counters at least %v, want t 1002, high 5001", raised, floor)
	}
	testenv.InSchema(t, dst, "ai_dst", "INSERT INTO t (v) VALUES (6)", "INSERT INTO high (v) VALUES (2)")
	if got := testenv.Dump(t, dst, "SELECT MAX(id) FROM ai_dst.t"); got[0] != `"1002"` {
		t.Fatalf("next id on the target: %v, want 1002 (past every id the source issued)", got)
	}
	if got := testenv.Dump(t, dst, "SELECT MAX(id) FROM ai_dst.high"); got[0] != `"5001"` {
		t.Fatalf("the target's higher counter moved: next id %v, want 5001", got)
	}
	start = time.Now()
	again, _, err := carryAutoIncrement(ctx, src, "ai_src", dst, "ai_dst", []string{"high", "t"}, nil, time.Second)
	if err != nil || len(again) != 0 {
		t.Fatalf("second run raised %v (%v), want nothing", again, err)
	}
	t.Logf("%s: the second run (reads only) took %s", testenv.Flavor(), time.Since(start))
}
