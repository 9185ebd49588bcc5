package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/shardmap"
)

// A split of a schema whose child references its parent by the parent's own
// id (Sakila's payment -> rental) reads the rows: a crossing present at
// planning refuses the split with the rows named and changes nothing; one
// written while the split runs stops it before the fence (exit 1), and
// 'plan resume' finishes it once the row is fixed. On a stock server (the
// sandbox installs nothing), under the ledger load.
func TestSplitChecksForeignKeysOnTheRows(t *testing.T) {
	c := newCluster(t, "e2e_catfk", []int{1, 1}, []int{200, 100})
	_, sharded, objects := c.loadCorpus("../testdata/schemas/child_by_id", "emp_no")
	checks := readFile(t, "../testdata/schemas/child_by_id/checks.sql")
	src := c.shards[0]
	sdb := c.env.DB(t, c.serverIndex(src.Server), src.Schema)
	lo := src.Lower
	at := lo + 101
	stay, move := lo+1, lo+150
	payments := dbutil.Table(src.Schema, "payments")
	point := func(payment, rental int64) {
		t.Helper()
		if _, err := sdb.Exec("UPDATE "+payments+" SET rental_id = ? WHERE payment_id = ?", rental*1000+1, payment*1000+1); err != nil {
			t.Fatal(err)
		}
	}
	split := []string{"split", "--shard", "1", "--at", fmt.Sprint(at), "--to", c.env.Addr(3).String()}

	// A staying payment names a moving rental: refused at planning, dry run or not.
	point(stay, move)
	before := catState(t, c)
	for _, extra := range [][]string{{"--dry-run"}, {"--yes"}, {"--yes", "-o", "json"}} {
		r := c.run(nil, append(split, extra...)...)
		out := r.stdout + r.stderr
		if r.code != 2 || !strings.Contains(out, "fk_payment_rental") || !strings.Contains(out, fmt.Sprintf("(payment_id)=(%d)", stay*1000+1)) ||
			!strings.Contains(out, fmt.Sprintf("(rental_id)=(%d)", move*1000+1)) || !strings.Contains(out, "stays while its parent moves") {
			t.Fatalf("split %v with a crossing row: exit %d\n%s", extra, r.code, out)
		}
	}
	if after := catState(t, c); after != before {
		t.Fatalf("a refused split changed something:\n%s", lineDiff(before, after))
	}
	t.Logf("the refusal: %s", c.run(nil, split...).stderr)

	// Fixed: the dry run shows the key it checked and what it found.
	point(stay, stay)
	dry := c.mustRun(append(split, "--dry-run")...)
	if !strings.Contains(dry.stdout, "fk_payment_rental") || !strings.Contains(dry.stdout, "0 would leave their parent, 0 would lose it") {
		t.Fatalf("dry run does not show the checked key:\n%s", dry.stdout)
	}

	lp := c.startLoad(100, fmt.Sprintf("staying=%d-%d", lo+1+50, at), fmt.Sprintf("moving=%d-%d", at, lo+201))
	r := c.run([]string{"SHARDCTL_FAULT=after:copy"}, append(split, "--yes", "--chunk-rows", "100")...)
	if !r.killed {
		t.Fatalf("the fault did not kill the split: exit %d\n%s", r.code, r.stderr)
	}
	files := planFiles(t, c.planDir)
	if len(files) != 1 {
		t.Fatalf("plan files: %v", files)
	}
	id := planID(files[0])
	// The application writes a crossing row while the split runs: a moving
	// payment now names a staying rental.
	point(move, stay)
	r = c.run(nil, "plan", "resume", id)
	if out := r.stdout + r.stderr; r.code != 1 || !strings.Contains(out, fmt.Sprintf("(payment_id)=(%d)", move*1000+1)) ||
		!strings.Contains(out, "moves while its parent stays") || !strings.Contains(out, "plan resume "+id) {
		t.Fatalf("resume with a crossing row: exit %d\n%s", r.code, out)
	}
	t.Logf("the stop before the fence: %s", r.stderr)
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := m.Function("employees")
	if res, _ := m.Lookup(f, fmt.Sprint(move)); res.Location.ShardID != src.ShardID || res.Mapping.Status != shardmap.Online {
		t.Fatalf("the stopped split moved key %d: %+v", move, res)
	}
	if n := one[int](t, sdb, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND LEFT(TRIGGER_NAME, ?) = ?", src.Schema, len(fence.TriggerPrefix), fence.TriggerPrefix); n != 0 {
		t.Fatalf("%d fence triggers on the source after a stop before the fence", n)
	}

	point(move, move)
	c.mustRun("plan", "resume", id)
	lp.stop(t)
	c.checkLedger(lp)
	c.ownership()
	c.checkCorpus(sharded, objects, src.Schema, checks)
	show := c.mustRun("plan", "show", id)
	t.Logf("plan show: %s", show.stdout)
	if !strings.Contains(show.stdout, "fk_payment_rental") || !strings.Contains(show.stdout, "read at verify") {
		t.Fatalf("plan show does not record the check before the fence:\n%s", show.stdout)
	}
}
