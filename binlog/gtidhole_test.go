package binlog

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
)

// gtidSubtract is MySQL's GTID_SUBTRACT(a, b).
func gtidSubtract(t *testing.T, db *sql.DB, a, b string) string {
	t.Helper()
	var out string
	if err := db.QueryRow("SELECT GTID_SUBTRACT(?, ?)", a, b).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func heldGTIDs(t *testing.T, db *sql.DB) string {
	t.Helper()
	_, have, err := HeldGTIDs(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return have
}

// TestStartSetWithAHoleBeforeItsPosition: MySQL's binary log status may
// report a GTID set that lacks a transaction written just before its
// position (counted at commit, after the binlog write; one status in five
// under 8 writers). Such a start, made here without the race, is the
// transaction H that set v = 1 before the position and outside the set;
// the row's later change (v = 2) is applied by the tail. The tail's
// checkpoint must hold H's GTID: with a hole there, a resume by GTID on a
// promoted replica is sent H again and leaves v = 1 on the target, newer
// changes nowhere replayed (TestFailoverDrill's "differs in last_name").
// A resume here from a checkpoint with the hole (written before this was
// fixed) must not apply H either, and fills the hole.
func TestStartSetWithAHoleBeforeItsPosition(t *testing.T) {
	p := newPair(t, "bl_gtidhole", "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	if !testenv.MySQL() {
		t.Skip("MariaDB's GTID position is one sequence number per domain and server: it has no holes")
	}
	tbl := dbutil.Table(p.schema, "t")
	tx(t, p.src, "INSERT INTO "+tbl+" VALUES (1, 0), (2, 0)")
	tx(t, p.dst, "INSERT INTO "+dbutil.Table(p.target(), "t")+" VALUES (1, 1), (2, 0)") // the copy, taken after H
	before := heldGTIDs(t, p.src)
	tx(t, p.src, "UPDATE "+tbl+" SET v = 1 WHERE id = 1") // H
	h := gtidSubtract(t, p.src, heldGTIDs(t, p.src), before)
	start := masterStatus(t, p.src)
	start.GTID = gtidSubtract(t, p.src, start.GTID, h)

	tl := start1(t, p, start)
	tx(t, p.src, "UPDATE "+tbl+" SET v = 2 WHERE id = 1")
	waitFor(t, tl, masterStatus(t, p.src))
	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	p.same(t, "t", "id")
	cp := tl.Applied()
	if ok, err := GTIDContains(mysql.MySQLFlavor, cp.GTID, h); err != nil || !ok {
		t.Fatalf("the checkpoint's GTID set %s lacks %s, written before the start position %s (%v)", cp.GTID, h, start, err)
	}

	// A resume on a promoted replica (here: the same server, named another).
	elsewhere := cp
	elsewhere.Server = "the-failed-primary"
	resume(t, p, elsewhere, "UPDATE "+tbl+" SET v = 3 WHERE id = 2")

	// A checkpoint with the hole, resumed here: H is not applied again.
	holed := cp
	holed.GTID = gtidSubtract(t, p.src, cp.GTID, h)
	tl = resume(t, p, holed, "UPDATE "+tbl+" SET v = 4 WHERE id = 2")
	if ok, err := GTIDContains(mysql.MySQLFlavor, tl.Applied().GTID, h); err != nil || !ok {
		t.Fatalf("resumed from a checkpoint lacking %s, the tail's checkpoint %s still lacks it (%v)", h, tl.Applied().GTID, err)
	}
}

func start1(t *testing.T, p pair, from Position) *Tailer {
	t.Helper()
	return start(t, p.config(t, from, p.tables(t, "t")))
}

// resume starts a tail from `from`, writes stmt on the source, waits for
// it, stops and compares the table.
func resume(t *testing.T, p pair, from Position, stmt string) *Tailer {
	t.Helper()
	tl := start1(t, p, from)
	tx(t, p.src, stmt)
	waitFor(t, tl, masterStatus(t, p.src))
	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	p.same(t, "t", "id")
	return tl
}

// TestHousekeepingShortcutNeedsTheEvents: WaitFor takes a position as
// reached when only housekeeping events lie between the tail and it, read
// with SHOW BINLOG EVENTS. MySQL's status can name a position past the
// events SHOW BINLOG EVENTS shows (a group being written), and a tail on a
// promoted replica starts from no position at all: neither is reached.
func TestHousekeepingShortcutNeedsTheEvents(t *testing.T) {
	p := newPair(t, "bl_housekeeping", "CREATE TABLE t (id INT PRIMARY KEY)")
	ctx := context.Background()
	tx(t, p.src, "INSERT INTO "+dbutil.Table(p.schema, "t")+" VALUES (1)")
	at := masterStatus(t, p.src)
	ahead := Position{File: at.File, Pos: at.Pos + 1000}
	if ok, err := onlyHousekeeping(ctx, p.src, at, ahead); err != nil || ok {
		t.Errorf("onlyHousekeeping(%s, %s) = %v, %v: a position the binlog does not show yet is not reached", at, ahead, ok, err)
	}
	if ok, err := onlyHousekeeping(ctx, p.src, Position{}, at); err != nil || ok {
		t.Errorf("onlyHousekeeping(none, %s) = %v, %v: a tail that has no position yet has not reached one", at, ok, err)
	}
	exec(t, p.src, "FLUSH BINARY LOGS")
	next := masterStatus(t, p.src)
	if ok, err := onlyHousekeeping(ctx, p.src, at, next); err != nil || !ok {
		t.Errorf("onlyHousekeeping(%s, %s) = %v, %v across a rotation: want reached", at, next, ok, err)
	}
}

// TestSourceCommittedWaitsForTheAppliedSet: verify's re-checks wait until
// the source has committed every transaction the tail applied (the binlog
// dump sends a group before the engine commits it). Here the tail's set
// holds a GTID the source never ran: the wait runs to its bound, then lets
// the caller compare again; with the real set it returns at once.
func TestSourceCommittedWaitsForTheAppliedSet(t *testing.T) {
	p := newPair(t, "bl_committed", "CREATE TABLE t (id INT PRIMARY KEY)")
	tl := start1(t, p, masterStatus(t, p.src))
	tx(t, p.src, "INSERT INTO "+dbutil.Table(p.schema, "t")+" VALUES (1)")
	waitFor(t, tl, masterStatus(t, p.src))
	ctx := context.Background()
	began := time.Now()
	if err := tl.SourceCommitted(ctx); err != nil || time.Since(began) > time.Second {
		t.Fatalf("SourceCommitted with everything committed: %v after %s", err, time.Since(began))
	}
	if !testenv.MySQL() {
		return // MariaDB keeps no set of committed GTIDs: nothing to wait on
	}
	tl.mu.Lock()
	ours := tl.applied.GTID
	tl.applied.GTID += ",3e11fa47-71ca-11e1-9e33-c80aa9429562:1"
	tl.mu.Unlock()
	began = time.Now()
	if err := tl.SourceCommitted(ctx); err != nil || time.Since(began) < time.Second {
		t.Fatalf("SourceCommitted with %s applied but not on the source (it has %s): %v after %s, want the bound", tl.Applied().GTID, ours, err, time.Since(began))
	}
}
