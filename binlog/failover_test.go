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
