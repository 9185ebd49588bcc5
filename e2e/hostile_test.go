package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// Issue 31's inputs that run an operation (the catalogue holds the ones a
// rule refuses before anything runs).

// TestSplitSchemaOfMultibyteCharacters: a --schema of 64 two-byte
// characters is inside every limit (64 characters, a 192-byte directory
// name) and the split runs to the end; a split stopped right after it
// registered its new shard's location, before it saved the id, is aborted
// with that location removed.
func TestSplitSchemaOfMultibyteCharacters(t *testing.T) {
	c := newCluster(t, "e2e_mb", []int{1, 2}, []int{60, 60})
	s3 := c.env.Addr(3).String()
	name := strings.Repeat("é", 64)
	c.env.DB(t, 3, "").Exec("DROP DATABASE IF EXISTS " + dbutil.QuoteIdent(name))
	t.Cleanup(func() { c.env.DB(t, 3, "").Exec("DROP DATABASE IF EXISTS " + dbutil.QuoteIdent(name)) })

	before := c.mapJSON()
	r := c.run([]string{"SHARDCTL_FAULT=prepare:registered"}, "split", "--shard", "1", "--at", "30", "--to", s3, "--schema", name, "--yes")
	if !r.killed {
		t.Fatalf("the fault did not kill the split: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(c.mapJSON(), name) {
		t.Fatalf("the killed split registered no location for %s:\n%s", name, c.mapJSON())
	}
	p, _ := c.onlyPlan()
	c.mustRun("plan", "abort", p.ID)
	if after := c.mapJSON(); after != before && !sameButVersion(before, after) {
		t.Fatalf("the abort left the shard map changed:\nbefore %s\nafter  %s", before, after)
	}

	r = c.run(nil, "split", "--shard", "1", "--at", "30", "--to", s3, "--schema", name, "--yes", "-o", "json")
	if r.code != 0 {
		t.Fatalf("split --schema of 64 two-byte characters: exit %d\n%s", r.code, r.stdout+r.stderr)
	}
	var n int
	if err := c.env.DB(t, 3, "").QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(name, "employees")).Scan(&n); err != nil || n == 0 {
		t.Fatalf("the new shard %s holds %d employees (%v)", name, n, err)
	}
}

// sameButVersion reports whether two shard maps differ only in the version.
func sameButVersion(a, b string) bool {
	strip := func(s string) string {
		var m map[string]any
		json.Unmarshal([]byte(s), &m)
		delete(m, "version")
		out, _ := json.Marshal(m)
		return string(out)
	}
	return strip(a) == strip(b)
}

// TestCleanupCountSurvivesKill: kill -9 with a cleanup chunk deleted and not
// yet recorded; after the resume the summary counts every row the cleanup
// deleted, the ones before the kill too.
func TestCleanupCountSurvivesKill(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_prcount", []int{2}, []int{200})
	src := c.db(2)
	counts := map[string]int64{}
	rows, err := src.Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", c.shards[0].Schema)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		names = append(names, s)
	}
	rows.Close()
	for _, tb := range names {
		var n int64
		if err := src.QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(c.shards[0].Schema, tb)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		counts[tb] = n
	}
	r := c.run([]string{"SHARDCTL_FAULT=cleanup:deleted"}, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--cleanup", "delete", "--prune-chunk-rows", "50")
	if !r.killed {
		t.Fatalf("the fault did not kill the move: exit %d\n%s", r.code, r.stderr)
	}
	p, _ := c.onlyPlan()
	var want int64
	for _, tb := range p.Cleanup {
		want += counts[tb.Name]
	}
	r = c.mustRun("plan", "resume", p.ID, "-o", "json")
	var out struct {
		Result plans.Result `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("plan resume -o json: %v\n%s", err, r.stdout)
	}
	p, _ = c.onlyPlan()
	if p.Result.RowsDeleted != want || out.Result.RowsDeleted != want {
		t.Fatalf("source rows cleaned up: plan %d, summary %d; the cleanup deleted %d (%v)", p.Result.RowsDeleted, out.Result.RowsDeleted, want, counts)
	}
}

// TestMetricsFileNotRegular: --metrics-file naming a device is refused
// (exit 2) before the move runs, and the device stays a device.
func TestMetricsFileNotRegular(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_mfile", []int{1, 2}, []int{30, 30})
	dev := filepath.Join(c.dir, "full")
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, int(1<<8|7)); err != nil { // /dev/full's numbers
		t.Skipf("mknod: %v", err)
	}
	before := c.mapJSON()
	r := c.run(nil, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--metrics-file", dev)
	if r.code != 2 || !strings.Contains(r.stderr, "regular file") {
		t.Errorf("--metrics-file DEVICE: exit %d, want 2 saying to give a regular file\n%s", r.code, r.stderr)
	}
	if st, err := os.Lstat(dev); err != nil || st.Mode()&os.ModeDevice == 0 {
		t.Errorf("the device was replaced: %v %v", st.Mode(), err)
	}
	if after := c.mapJSON(); after != before {
		t.Errorf("the refused move changed the shard map:\nbefore %s\nafter  %s", before, after)
	}
	if files := planFiles(t, c.planDir); len(files) != 0 {
		t.Errorf("the refused move left plan files %v", files)
	}
}
