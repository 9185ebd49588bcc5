package pipeline

import (
	"context"
	"database/sql"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// session opens a connection of db that keeps a transaction open after stmts.
func holding(t *testing.T, db *sql.DB, stmts ...string) (*sql.Conn, int64) {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var id int64
	if err := conn.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	for _, q := range append([]string{"BEGIN"}, stmts...) {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return conn, id
}

// The sessions holding a fenced table are found from the most exact source
// the server has (MySQL: performance_schema; MariaDB: the METADATA_LOCK_INFO
// plugin when installed, else the open transactions), and the kill ends a
// writer but, in the processlist fallback, never a reader.
func TestFindAndKillBlockers(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	ctx := context.Background()
	testenv.Schema(t, db, "blk", "CREATE TABLE moving (id INT PRIMARY KEY, v INT)", "CREATE TABLE other (id INT PRIMARY KEY)",
		"INSERT INTO moving VALUES (1, 1), (2, 2)", "INSERT INTO other VALUES (1)")
	find := func(want string) []blocker {
		t.Helper()
		bs, err := findBlockers(ctx, db, "blk", []string{"moving"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.Source != want {
				t.Fatalf("source %q, want %q: %+v", b.Source, want, bs)
			}
		}
		return bs
	}
	has := func(bs []blocker, id int64) *blocker {
		for i := range bs {
			if bs[i].ID == id {
				return &bs[i]
			}
		}
		return nil
	}
	kill := func(writer *sql.Conn, wid, rid int64) []plans.Blocker {
		t.Helper()
		killed, err := killBlockers(ctx, db, "blk", []string{"moving"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !findKilled(killed, wid) {
			t.Fatalf("writer not killed: %+v", killed)
		}
		if _, err := writer.ExecContext(ctx, "COMMIT"); err == nil {
			t.Fatal("the killed writer could still commit")
		}
		return killed
	}
	_, oid := holding(t, db, "UPDATE blk.other SET id = 2 WHERE id = 1")
	_, rid := holding(t, db, "SELECT COUNT(*) FROM blk.moving")
	exact := srcMetadataLocks
	if !testenv.MySQL() {
		exact = srcLockInfo
		writer, wid := holding(t, db, "USE blk", "UPDATE moving SET v = 3 WHERE id = 1")
		_, elsewhere := holding(t, db, "UPDATE blk.moving SET v = 5 WHERE id = 2") // no default schema: may work on another shard
		bs := find(srcOpenTrx)
		if has(bs, wid) == nil || has(bs, rid) == nil || !has(bs, wid).writes || has(bs, rid).writes {
			t.Fatalf("processlist fallback: %+v", bs)
		}
		if killed := kill(writer, wid, rid); len(killed) != 1 || findKilled(killed, elsewhere) {
			t.Fatalf("the fallback kills only writers working in the fenced schema: %+v", killed)
		}
		if _, err := db.Exec("INSTALL SONAME 'metadata_lock_info'"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = db.Exec("UNINSTALL SONAME 'metadata_lock_info'") })
	}
	writer, wid := holding(t, db, "UPDATE blk.moving SET v = 4 WHERE id = 1")
	bs := find(exact)
	if w := has(bs, wid); w == nil || w.Table != "moving" || w.Lock == "" || has(bs, rid) == nil || has(bs, oid) != nil {
		t.Fatalf("%s: writer %d and reader %d hold moving, %d holds only other: %+v", exact, wid, rid, oid, bs)
	}
	kill(writer, wid, rid)
}

func findKilled(bs []plans.Blocker, id int64) bool {
	for _, b := range bs {
		if b.ID == id && b.Killed {
			return true
		}
	}
	return false
}
