package e2e

import (
	"maps"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// TestTargetFullDuringCopy: the target runs out of space during the copy.
// A mount of a small tmpfs would need privileges a CI container may not
// have, so the target is a server of its own whose InnoDB system tablespace
// (file-per-table off) has a size limit: filled to the brim, then given 4 MB
// more (a restart with a higher limit), the copy of a 6,000-employee shard
// meets a real "table is full" (1114). The move exits 1 naming the server,
// the table and what to free, the source and the shard map untouched; once
// space is freed (the limit raised), 'plan resume' finishes the move. Under
// the ledger load.
func TestTargetFullDuringCopy(t *testing.T) {
	env := testenv.Get(t)
	port, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandbox.Config{Dir: t.TempDir(), Servers: 1, BasePort: port, Flavor: testenv.Flavor(), DieWithParent: true, Lean: true}
	limit := func(max string) {
		t.Helper()
		_ = sandbox.Down(ctx, cfg, false)
		cfg.ExtraArgs = []string{"--innodb-file-per-table=0", "--innodb-data-file-path=ibdata1:12M:autoextend:max:" + max, "--innodb-autoextend-increment=4"}
		if _, err := sandbox.Up(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	limit("32M")
	t.Cleanup(func() { _ = sandbox.Down(ctx, cfg, true) })
	small := dbutil.Addr{Host: "127.0.0.1", Port: port}
	db, err := dbutil.Open(ctx, small, sandbox.Creds(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fill(t, db)
	limit("36M")

	c := newClusterAt(t, "e2e_full", []dbutil.Addr{env.Addr(2)}, []int{6000}, false)
	below := c.untouchedBelow(1, 6000)
	before := tableSums(t, c.db(2), c.shards[0].Schema, below)
	lp := c.startLoad(100, c.keys("moving", 1, 6000))
	r := c.run(nil, "move", "--shard", "1", "--to", small.String(), "--yes")
	t.Logf("exit %d:\n%s", r.code, lastLines(r.stderr, 3))
	if r.code != 1 {
		t.Fatalf("the move onto a full target exited %d, want 1:\n%s", r.code, r.stderr)
	}
	// The copy's creation of the tables may meet the limit first (seen on MySQL).
	if !strings.Contains(r.stderr, "step copy") && !strings.Contains(r.stderr, "step create") {
		t.Errorf("the failure names neither the copy nor the create step:\n%s", r.stderr)
	}
	for _, want := range []string{small.String() + " is out of space", "copy " + c.shards[0].Schema + ".", "free space", "plan resume"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the failure does not say %q:\n%s", want, r.stderr)
		}
	}
	c.wantShardAt(1, 2)
	wantMappings(t, c, 1, shardmap.Online)
	if after := tableSums(t, c.db(2), c.shards[0].Schema, below); !maps.Equal(before, after) {
		t.Errorf("the source changed under the failed copy:\nbefore %v\nafter  %v", before, after)
	}
	limit("256M")
	id := strings.TrimSuffix(strings.TrimPrefix(planFiles(t, c.planDir)[0], c.planDir+"/"), ".json")
	c.mustRun("plan", "resume", id)
	lp.stop(t)
	c.checkLedger(lp)
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := m.Location(1); l.Addr() != small {
		t.Errorf("shard 1 is at %s after the resume, want %s", l.Addr(), small)
	}
}

// fill fills db's InnoDB system tablespace up to its limit with a filler
// table.
func fill(t *testing.T, db dbutil.Querier) {
	t.Helper()
	for _, q := range []string{"CREATE DATABASE e2e_full_filler", "CREATE TABLE e2e_full_filler.f (id INT AUTO_INCREMENT PRIMARY KEY, b MEDIUMBLOB) ENGINE=InnoDB"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, size := range []int{256 << 10, 16 << 10, 1 << 10} {
		for i := 0; ; i++ {
			_, err := db.ExecContext(ctx, "INSERT INTO e2e_full_filler.f (b) VALUES (REPEAT('x', ?))", size)
			if dbutil.ErrNumber(err) == 1114 {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if i > 10000 {
				t.Fatal("the system tablespace never filled")
			}
		}
	}
}
