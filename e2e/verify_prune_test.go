package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
)

func TestVerifyFindsAChangedRow(t *testing.T) {
	c := newCluster(t, "e2e_verify", []int{1, 2}, []int{500, 300})
	c.mustRun("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--keep-source")
	old := c.env.Addr(1).String()
	r := c.mustRun("verify", "--shard", "1", "--against", old, "--chunk-rows", "100")
	if !strings.Contains(r.stdout, "OK: every chunk matches") {
		t.Fatalf("clean copy: %s", r.stdout)
	}
	// Change one row of the kept source copy (through the fence).
	key := c.shards[0].Lower + 250
	conn, err := c.db(1).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn.ExecContext(ctx, fence.BypassSQL)
	if _, err := conn.ExecContext(ctx, "UPDATE "+dbutil.Table(c.shards[0].Schema, "employees")+" SET last_name = 'Changed' WHERE emp_no = ?", key); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	r = c.run(nil, "verify", "--shard", "1", "--against", old, "--chunk-rows", "100", "-o", "json")
	if r.code != 5 {
		t.Fatalf("verify of a changed copy: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var res struct {
		Mismatches []struct {
			Table  string
			Lo, Hi []string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("verify json (one document on stdout): %v\n%s", err, r.stdout)
	}
	if len(res.Mismatches) != 1 || res.Mismatches[0].Table != "employees" {
		t.Fatalf("mismatches: %+v", res.Mismatches)
	}
	m := res.Mismatches[0]
	lo, _ := strconv.ParseInt(first(m.Lo, "-1"), 10, 64)
	hi, _ := strconv.ParseInt(first(m.Hi, "9999999999"), 10, 64)
	if !(lo < key && key <= hi) {
		t.Fatalf("chunk (%d, %d] does not hold the changed key %d", lo, hi, key)
	}
	t2 := c.run(nil, "verify", "--shard", "1", "--against", old, "--chunk-rows", "100")
	if !strings.Contains(t2.stdout, "DIFFERS: employees rows (") {
		t.Fatalf("text report: %s", t2.stdout)
	}
}

func first(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}

func TestPruneLeavesExactlyTheOwnedRows(t *testing.T) {
	c := newCluster(t, "e2e_prune", []int{1, 2}, []int{400, 400})
	s1 := c.db(1)
	// Plant 40 employees and their salaries that shard 2 owns into shard 1's schema.
	lo2 := c.shards[1].Lower
	for _, tb := range []string{"employees", "salaries"} {
		copyRows(t, c.db(2), c.shards[1].Schema, s1, c.shards[0].Schema, tb, fmt.Sprintf("emp_no BETWEEN %d AND %d", lo2+1, lo2+40))
	}
	owned := c.fleetSums(nil)
	count := func() int64 {
		var n int64
		s1.QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(c.shards[0].Schema, "employees")).Scan(&n)
		return n
	}
	if count() != 440 {
		t.Fatalf("planted rows: %d", count())
	}
	r := c.mustRun("prune", "--shard", "1", "--dry-run")
	if !strings.Contains(r.stdout, "employees") || !strings.Contains(r.stdout, "40") || count() != 440 {
		t.Fatalf("dry run: %s (rows now %d)", r.stdout, count())
	}
	// The dry run reports what the run deletes (issue 8: it said 0).
	var dry, real []struct {
		Table       string
		Rows        int64
		Deleted     int64
		WouldDelete int64 `json:"would_delete"`
	}
	json.Unmarshal([]byte(c.mustRun("prune", "--shard", "1", "--dry-run", "-o", "json").stdout), &dry)
	json.Unmarshal([]byte(c.mustRun("prune", "--shard", "1", "--chunk-rows", "7", "-o", "json").stdout), &real)
	if len(dry) == 0 || len(dry) != len(real) {
		t.Fatalf("dry run %+v, run %+v", dry, real)
	}
	for i := range dry {
		// The run reports as not owned what it deleted (it does not count first).
		if dry[i].Table != real[i].Table || dry[i].WouldDelete != real[i].Deleted || dry[i].Deleted != 0 || real[i].Rows != dry[i].Rows {
			t.Errorf("dry run %+v, run %+v", dry[i], real[i])
		}
	}
	if count() != 400 {
		t.Fatalf("after prune shard 1 has %d employees, want 400", count())
	}
	c.ownership()
	after := c.fleetSums(nil)
	// The planted copies are gone; the fleet equals what it was without them.
	for _, tb := range []string{"titles", "dept_emp", "dept_manager"} {
		if after[tb] != owned[tb] {
			t.Errorf("%s changed: %s -> %s", tb, owned[tb], after[tb])
		}
	}
	if after["employees"] == owned["employees"] {
		t.Errorf("employees unchanged: prune deleted nothing?")
	}
}
