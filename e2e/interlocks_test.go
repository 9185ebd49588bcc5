package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
)

// mapJSON is the shard map as 'shardmap show -o json' prints it.
func (c *cluster) mapJSON() string {
	c.t.Helper()
	m, err := c.store.Load(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func planID(path string) string { return strings.TrimSuffix(filepath.Base(path), ".json") }

// Data-loss case 1 of issue 8: a plan stopped mid-copy, the shard then moved
// to that same target by another plan. Resuming the stale plan is refused;
// aborting it must not drop what is by then the live shard.
func TestStalePlanAbortKeepsTheLiveShard(t *testing.T) {
	c := newCluster(t, "e2e_stale", []int{1, 1}, []int{300, 200})
	to := c.env.Addr(3).String()
	schema := c.shards[0].Schema
	r := c.run([]string{"SHARDCTL_FAULT=after:copy"}, "move", "--shard", "1", "--to", to, "--yes")
	if !r.killed {
		t.Fatalf("not killed: exit %d\n%s", r.code, r.stderr)
	}
	stale := planFiles(t, c.planDir)
	if len(stale) != 1 {
		t.Fatalf("plan files: %v", stale)
	}
	// A plan written now, applied after the shard moved, is refused too.
	early := filepath.Join(c.dir, "early.json")
	c.mustRun("move", "--shard", "1", "--to", c.env.Addr(2).String(), "--plan-out", early)
	// The operator drops the half copy (as the refusal says) and moves the shard there with a new plan.
	if _, err := c.db(3).Exec("DROP DATABASE " + dbutil.QuoteIdent(schema)); err != nil {
		t.Fatal(err)
	}
	c.mustRun("move", "--shard", "1", "--to", to, "--yes")
	live := tableSums(t, c.db(3), schema, 1<<40)
	before := c.mapJSON()
	staleBytes := readAll(t, stale[0])

	earlyBytes := readAll(t, early)
	r = c.run(nil, "plan", "apply", early)
	if r.code != 2 || !strings.Contains(r.stderr, "stale") || readAll(t, early) != earlyBytes || c.mapJSON() != before ||
		schemaExists(t, c.db(2), schema) {
		t.Fatalf("apply of a plan made before the shard moved: exit %d\n%s", r.code, r.stderr)
	}
	r = c.run(nil, "plan", "resume", planID(stale[0]))
	if r.code != 2 || !strings.Contains(r.stderr, "stale") || !strings.Contains(r.stderr, "plan abort") {
		t.Fatalf("resume of a stale plan: exit %d\n%s", r.code, r.stderr)
	}
	if readAll(t, stale[0]) != staleBytes || c.mapJSON() != before {
		t.Fatal("a refused resume changed the plan file or the shard map")
	}
	r = c.run(nil, "plan", "abort", planID(stale[0]))
	if r.code != 0 || !strings.Contains(r.stdout, "Kept") || !strings.Contains(r.stdout, "shard 1 lives there") {
		t.Fatalf("abort of a stale plan: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if after := tableSums(t, c.db(3), schema, 1<<40); fmt.Sprint(after) != fmt.Sprint(live) {
		t.Fatalf("the live shard changed: %v -> %v", live, after)
	}
	if c.mapJSON() != before {
		t.Fatal("abort of a stale plan changed the shard map")
	}
	c.ownership()
}

// Issue 10: the merge's collision scan runs at 'plan apply' too.
func TestMergeApplyRefusesACollision(t *testing.T) {
	c := newCluster(t, "e2e_mcoll", []int{1, 2}, []int{200, 200})
	file := filepath.Join(c.dir, "merge.json")
	c.mustRun("merge", "--shard", "2", "--into", "1", "--plan-out", file)
	// A row of shard 2 appears in shard 1 after the plan was made.
	key := c.shards[1].Lower + 5
	var first, last, gender, birth, hire string
	if err := c.db(2).QueryRow("SELECT first_name, last_name, gender, CAST(birth_date AS CHAR), CAST(hire_date AS CHAR) FROM "+dbutil.Table(c.shards[1].Schema, "employees")+" WHERE emp_no = ?", key).
		Scan(&first, &last, &gender, &birth, &hire); err != nil {
		t.Fatal(err)
	}
	if _, err := c.db(1).Exec("INSERT INTO "+dbutil.Table(c.shards[0].Schema, "employees")+" (emp_no, first_name, last_name, gender, birth_date, hire_date) VALUES (?, ?, ?, ?, ?, ?)",
		key, first, last, gender, birth, hire); err != nil {
		t.Fatal(err)
	}
	before := c.mapJSON()
	s1, s2 := tableSums(t, c.db(1), c.shards[0].Schema, 1<<40), tableSums(t, c.db(2), c.shards[1].Schema, 1<<40)
	planBytes, _ := os.ReadFile(file)
	r := c.run(nil, "plan", "apply", file)
	if r.code != 2 || !strings.Contains(r.stderr, "collide") || !strings.Contains(r.stderr, fmt.Sprint(key)) || !strings.Contains(r.stderr, "PRIMARY") {
		t.Fatalf("apply with a collision: exit %d\n%s", r.code, r.stderr)
	}
	after, _ := os.ReadFile(file)
	if c.mapJSON() != before || string(after) != string(planBytes) ||
		fmt.Sprint(tableSums(t, c.db(1), c.shards[0].Schema, 1<<40)) != fmt.Sprint(s1) ||
		fmt.Sprint(tableSums(t, c.db(2), c.shards[1].Schema, 1<<40)) != fmt.Sprint(s2) {
		t.Fatal("a refused apply changed something")
	}
}

// Issue 8, item 6: 'go build && ./shardctl version' in the directory that
// holds the binary; the binary is not a config file.
func TestVersionNextToTheBinary(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shardctl"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("./shardctl", "version")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "shardctl ") {
		t.Fatalf("./shardctl version next to the binary: %v\n%s", err, out)
	}
}
