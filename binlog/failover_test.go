package binlog

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
)

// TestTailOnAnotherServerStartsByGTID: a start position recorded on another
// server (the primary that died before its replica was promoted) names a
// binlog file of that server. Its file name says nothing about this server's
// files: a primary that rotated more often than its replica has files past
// the replica's newest, one that rotated less has files the replica would
// call purged. The tail starts from the GTID set either way and applies what
// follows it.
func TestTailOnAnotherServerStartsByGTID(t *testing.T) {
	p := newPair(t, "bl_failover", "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	ctx := context.Background()
	tbl := dbutil.Table(p.schema, "t")
	for i, file := range []string{"binlog.999999", "binlog.000000"} { // beyond the newest; before the oldest
		here, err := WithGTID(ctx, p.src, masterStatus(t, p.src))
		if err != nil {
			t.Fatal(err)
		}
		if here.GTID == "" {
			t.Fatalf("the source reports no GTID set at %s", here)
		}
		elsewhere := Position{File: file, Pos: 4, GTID: here.GTID, Server: "the-failed-primary"}
		tx(t, p.src, "INSERT INTO "+tbl+" VALUES ("+fmt.Sprint(i+1)+", 1)")
		tx(t, p.src, "UPDATE "+tbl+" SET v = v + 1")
		tl, err := Start(ctx, p.config(t, elsewhere, p.tables(t, "t")))
		if err != nil {
			t.Fatalf("start on a promoted replica from %s (GTID %s): %v", file, here.GTID, err)
		}
		waitFor(t, tl, masterStatus(t, p.src))
		if err := tl.Stop(); err != nil {
			t.Fatal(err)
		}
		if got := tl.Applied(); got.Server == elsewhere.Server || got.File == file {
			t.Errorf("the tail's checkpoint %+v still names the other server's file", got)
		}
		p.same(t, "t", "id")
	}

}

// TestCheckpointKeepsTheGTIDOfASkippedStatement: canal skips a statement its
// parser cannot read (a CREATE TRIGGER) without a position event. The
// tail's checkpoint still holds that statement's GTID: a hole in the set
// would make a resume by GTID on a promoted replica receive it again.
func TestCheckpointKeepsTheGTIDOfASkippedStatement(t *testing.T) {
	p := newPair(t, "bl_skipgtid", "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	ctx := context.Background()
	other := p.schema + "_other"
	exec(t, p.src, "DROP DATABASE IF EXISTS "+dbutil.QuoteIdent(other))
	exec(t, p.src, "CREATE DATABASE "+dbutil.QuoteIdent(other))
	t.Cleanup(func() { _, _ = p.src.Exec("DROP DATABASE IF EXISTS " + dbutil.QuoteIdent(other)) })
	exec(t, p.src, "CREATE TABLE "+dbutil.Table(other, "o")+" (id INT PRIMARY KEY)")
	here, err := WithGTID(ctx, p.src, masterStatus(t, p.src))
	if err != nil {
		t.Fatal(err)
	}
	tl := start(t, p.config(t, here, p.tables(t, "t")))
	exec(t, p.src, "CREATE TRIGGER "+dbutil.Table(other, "o_bi")+" BEFORE INSERT ON "+dbutil.Table(other, "o")+" FOR EACH ROW SET NEW.id = NEW.id")
	tx(t, p.src, "INSERT INTO "+dbutil.Table(p.schema, "t")+" VALUES (1, 1)")
	end, err := WithGTID(ctx, p.src, masterStatus(t, p.src))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, tl, end)
	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	f, err := dbutil.FlavorOf(ctx, p.src)
	if err != nil {
		t.Fatal(err)
	}
	got := tl.Applied().GTID
	if ok, err := GTIDContains(f.Name(), got, end.GTID); err != nil || !ok {
		t.Fatalf("the checkpoint's GTID set %q does not hold the source's %q (%v): the skipped CREATE TRIGGER left a hole", got, end.GTID, err)
	}
}
