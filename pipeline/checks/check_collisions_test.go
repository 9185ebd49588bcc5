package checks

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// The merge's collision scan walks both servers in key order: it finds a
// collision in the last key of a table of several chunks (on the primary key,
// and on a unique key whose collation folds case and trailing spaces), skips
// a key that carries the shard column, and scans again at a later run only
// when a server has written since.
func TestCollisionScan(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	sdb, tdb := env.DB(t, 1, ""), env.DB(t, 2, "")
	const rows = 50000 // 3 chunks of the scan
	ddl := "CREATE TABLE t (id INT NOT NULL PRIMARY KEY, sk INT NOT NULL, code VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL, note VARCHAR(10) NULL," +
		" UNIQUE KEY code (code), UNIQUE KEY sk_note (sk, note))"
	testenv.Schema(t, sdb, "coll_s", ddl, "INSERT INTO t SELECT seq, seq, CONCAT('c', seq), 'x' FROM seq_1_to_50000")
	testenv.Schema(t, tdb, "coll_t", ddl, "INSERT INTO t SELECT seq, seq, CONCAT('d', seq), 'x' FROM seq_100001_to_150000")
	lo, hi := keyspace.IntK(1), keyspace.IntK(100001)
	p := &plans.Plan{Operation: "merge",
		Source: plans.Endpoint{ShardID: 2, Host: env.Addr(1).Host, Port: env.Addr(1).Port, Schema: "coll_s"},
		Target: plans.Endpoint{ShardID: 1, Host: env.Addr(2).Host, Port: env.Addr(2).Port, Schema: "coll_t"},
		Copy: []tables.Table{{Name: "t", Sharded: true, ShardColumn: "sk",
			Filter: keyspace.Filter{Column: "sk", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}}},
	}
	if err := collisions(ctx, sdb, tdb, p); err != nil {
		t.Fatal(err)
	}
	c := p.Collisions
	if c == nil || strings.Join(c.Scanned, ";") != "t.PRIMARY (id);t.code (code)" || strings.Join(c.Skipped, ";") != "t.sk_note (sk,note)" {
		t.Fatalf("scan record: %+v", c)
	}
	run := func(q string) {
		t.Helper()
		if _, err := tdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	// A stray row of the target in the merged range: the shard column's key
	// is scanned too, and the stray found.
	run("INSERT INTO coll_t.t VALUES (150001, " + strconv.Itoa(rows) + ", 'e1', 'x')")
	p.Collisions.Here = false
	if err := collisions(ctx, sdb, tdb, p); err == nil || !strings.Contains(err.Error(), "t key sk_note (sk,note): "+strconv.Itoa(rows)+",x") {
		t.Fatalf("a stray in the merged range: %v", err)
	}
	run("DELETE FROM coll_t.t WHERE id = 150001")
	if err := collisions(ctx, sdb, tdb, p); err != nil || strings.Join(p.Collisions.Skipped, ";") != "t.sk_note (sk,note)" {
		t.Fatalf("after the stray went: %v %+v", err, p.Collisions)
	}
	// Nothing written since: a later run (another process) does not scan again.
	p.Collisions.Here = false
	last := p.Collisions
	if err := collisions(ctx, sdb, tdb, p); err != nil || p.Collisions != last {
		t.Fatalf("scanned again with nothing written since: %v", err)
	}
	// The last key collides on the case- and space-folding unique key.
	run("INSERT INTO coll_t.t VALUES (150002, 150002, 'C50000 ', 'x')")
	p.Collisions.Here = false
	err := collisions(ctx, sdb, tdb, p)
	if err == nil || !strings.Contains(err.Error(), "t key code (code): C50000") {
		t.Fatalf("a collision on the last key of the unique key: %v", err)
	}
	run("DELETE FROM coll_t.t WHERE id = 150002")
	// And on the primary key's last value.
	run("INSERT INTO coll_t.t VALUES (" + strconv.Itoa(rows) + ", 150003, 'e3', 'x')")
	err = collisions(ctx, sdb, tdb, p)
	if err == nil || !strings.Contains(err.Error(), "t key PRIMARY (id): "+strconv.Itoa(rows)) {
		t.Fatalf("a collision on the last primary key: %v", err)
	}
}
