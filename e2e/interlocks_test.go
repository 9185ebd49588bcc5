package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
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
	testenv.FlavorNeutral(t)
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
	if r.code != 2 || !strings.Contains(r.stderr, "stale") || !strings.Contains(r.stderr, "shardctl plan abort "+early) || readAll(t, early) != earlyBytes || c.mapJSON() != before ||
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
	testenv.FlavorNeutral(t)
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
	testenv.FlavorNeutral(t)
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

// queryStrings is the first column of every row of q.
func queryStrings(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// world is everything a refused run must leave as it was: the shard map, the
// plan directory (names and bytes), the plans table, and every server's
// schemas of this test with their rows.
func (c *cluster) world() string {
	c.t.Helper()
	var b strings.Builder
	b.WriteString(c.mapJSON() + "\n")
	files := planFiles(c.t, c.planDir)
	fmt.Fprintf(&b, "plan files %v\n%s\n", files, readAll(c.t, files...))
	rows, err := c.db(1).Query("SELECT id, state, revision FROM " + dbutil.Table(c.name, "plans") + " ORDER BY id")
	if err == nil {
		for rows.Next() {
			var id, state string
			var rev int64
			rows.Scan(&id, &state, &rev)
			fmt.Fprintf(&b, "plans row %s %s %d\n", id, state, rev)
		}
		rows.Close()
	} else if dbutil.ErrNumber(err) != 1146 {
		c.t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		for _, s := range queryStrings(c.t, c.db(i), "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ? ORDER BY SCHEMA_NAME", c.name+"\\_%") {
			fmt.Fprintf(&b, "server %d %s %v\n", i, s, tableSums(c.t, c.db(i), s, 1<<40))
		}
	}
	return b.String()
}

// Issue 21, item 5: every refusal of a run happens before the plan file and
// the plans-table row exist, or removes them: the shard's lock held by
// another run (exit 4), metrics outputs that cannot be opened, a plan-start
// hook that vetoes or times out (exit 2). A cron wrapper finds nothing to
// resume afterwards.
func TestRefusedRunsLeaveNothing(t *testing.T) {
	testenv.FlavorNeutral(t)
	alongside(t)
	c := newCluster(t, "e2e_refused", []int{1, 1}, []int{200, 100})
	to := c.env.Addr(2).String()
	// Something in the plans table already, so the table exists.
	c.mustRun("move", "--shard", "2", "--to", to, "--yes")
	veto := filepath.Join(c.dir, "veto.sh")
	slow := filepath.Join(c.dir, "slow.sh")
	os.WriteFile(veto, []byte("#!/bin/sh\necho vetoed >&2\nexit 1\n"), 0o755)
	os.WriteFile(slow, []byte("#!/bin/sh\nsleep 5\n"), 0o755)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	held := filepath.Join(c.dir, "held.json")
	c.mustRun("move", "--shard", "1", "--to", to, "--plan-out", held)
	hp, err := plans.Load(held)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(held)

	move := []string{"move", "--shard", "1", "--to", to, "--yes"}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"plan-start hook vetoes", append([]string{"--hook", "plan-start=" + veto}, move...), 2, "plan-start hook refused"},
		{"plan-start hook times out", append([]string{"--hook", "plan-start=" + slow, "--hook-timeout", "300ms"}, move...), 2, "plan-start hook refused"},
		{"metrics file in a missing directory", append([]string{"--metrics-file", filepath.Join(c.dir, "nodir", "m.prom")}, move...), 2, "nodir"},
		{"metrics file in /proc", append([]string{"--metrics-file", "/proc/shardctl.prom"}, move...), 2, "/proc"},
		{"metrics address busy", append([]string{"--metrics-addr", busy.Addr().String()}, move...), 2, busy.Addr().String()},
		{"metrics address malformed", append([]string{"--metrics-addr", "no-port-here"}, move...), 2, "no-port-here"},
		{"shard lock held", move, 4, "locked by another operation"},
		{"split schema too long", []string{"split", "--shard", "1", "--to", to, "--schema", strings.Repeat("x", 65), "--yes"}, 2, "at most 64"},
	}
	before := c.world()
	for _, tc := range cases {
		var l *lock.Lock
		if tc.code == 4 {
			if l, err = lock.Acquire(ctx, c.db(1), c.name, hp.Locks, lock.Holder("test")); err != nil {
				t.Fatal(err)
			}
		}
		for _, mode := range [][]string{nil, {"-o", "json"}} {
			r := c.run(nil, append(tc.args, mode...)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%s %v: exit %d, want %d saying %q\n%s", tc.name, mode, r.code, tc.code, tc.want, r.stderr)
			}
			if mode != nil && !json.Valid([]byte(r.stdout)) {
				t.Errorf("%s -o json: stdout is not one JSON document: %q", tc.name, r.stdout)
			}
			if after := c.world(); after != before {
				t.Errorf("%s %v left something behind:\nbefore %s\nafter  %s", tc.name, mode, before, after)
				before = after
			}
		}
		if l != nil {
			l.Release()
		}
	}
	// Nothing to resume: a cron wrapper that lists unfinished plans finds none.
	if r := c.mustRun("plan", "list"); strings.Contains(r.stdout, "stopped") || strings.Contains(r.stdout, " new ") {
		t.Errorf("plan list after the refusals:\n%s", r.stdout)
	}
}

// Issue 21, item 7: a plan whose create step failed (a schema name the server
// refuses, in a plan made before names were checked) can be aborted; the
// abort removes what the plan made (the location its create registered) and
// nothing else.
func TestAbortAfterCreateFailed(t *testing.T) {
	c := newCluster(t, "e2e_badcreate", []int{1}, []int{200})
	file := filepath.Join(c.dir, "split.json")
	c.mustRun("split", "--shard", "1", "--to", c.env.Addr(2).String(), "--plan-out", file)
	p, err := plans.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 65)
	p.Target.Schema = long
	for i := range p.Prepare {
		p.Prepare[i].Schema = long
	}
	if err := plans.Save(file, p); err != nil {
		t.Fatal(err)
	}
	before := c.mapJSON()
	source := tableSums(t, c.db(1), c.shards[0].Schema, 1<<40)
	r := c.run(nil, "plan", "apply", file)
	if r.code == 0 || r.code == 2 {
		t.Fatalf("apply of a plan whose schema name the server refuses: exit %d\n%s", r.code, r.stderr)
	}
	r = c.run(nil, "plan", "abort", file)
	if r.code != 0 {
		t.Fatalf("abort after the create step failed: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if got := c.mapJSON(); got != before {
		t.Errorf("the abort left the shard map changed:\nbefore %s\nafter  %s", before, got)
	}
	if got := tableSums(t, c.db(1), c.shards[0].Schema, 1<<40); fmt.Sprint(got) != fmt.Sprint(source) {
		t.Errorf("the source shard changed: %v -> %v", source, got)
	}
	if p, err := plans.Load(file); err != nil || p.State != plans.StateAborted {
		t.Errorf("plan after abort: %v %v", p.State, err)
	}
}

// Issue 21, item 8 and "also seen": a stopped run's -o json error carries the
// plan id; the after-cleanup hook sees the plan done; a dry run of a second
// move to a running move's target names that plan instead of "drop it";
// 'plan watch' of a plan no process runs ends (exit 3) and says so.
func TestIssue21Leftovers(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_leftover", []int{1, 1}, []int{200, 100})
	s2, s3 := c.env.Addr(2).String(), c.env.Addr(3).String()

	r := c.run([]string{"SHARDCTL_FAULT=fail:fence:ready"}, "move", "--shard", "1", "--to", s3, "--yes", "--cutover-attempts", "1", "-o", "json", "--retry-for", "0")
	var doc struct {
		PlanID   string `json:"plan_id"`
		State    string `json:"state"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 3 || doc.ExitCode != 3 || doc.PlanID == "" || doc.State != plans.StateStopped {
		t.Fatalf("a stopped move with -o json: exit %d, document %+v (%v)\n%s\n%s", r.code, doc, err, r.stdout, r.stderr)
	}
	stateLog := filepath.Join(c.dir, "state.log")
	hook := filepath.Join(c.dir, "after-cleanup.sh")
	os.WriteFile(hook, []byte("#!/bin/sh\necho \"$SHARDCTL_PLAN_STATE\" >> "+stateLog+"\n"), 0o755)
	c.mustRun("plan", "resume", doc.PlanID, "--hook", "after-cleanup="+hook)
	if got := strings.TrimSpace(readAll(t, stateLog)); got != plans.StateDone {
		t.Errorf("the after-cleanup hook saw SHARDCTL_PLAN_STATE=%q, want done", got)
	}

	// A move of shard 2 to server 2, killed after its copy: nobody runs it.
	r = c.run([]string{"SHARDCTL_FAULT=after:copy"}, "move", "--shard", "2", "--to", s2, "--yes")
	if !r.killed {
		t.Fatalf("move not killed: exit %d\n%s", r.code, r.stderr)
	}
	var p *plans.Plan
	for _, f := range planFiles(t, c.planDir) {
		if q, err := plans.Load(f); err == nil && q.Source.ShardID == 2 {
			p = q
		}
	}
	if p == nil || p.State != plans.StateRunning {
		t.Fatalf("want the killed move's plan in state running: %+v", p)
	}
	r = c.run(nil, "move", "--shard", "2", "--to", s2, "--dry-run")
	if r.code != 2 || !strings.Contains(r.stderr, "target copy of plan "+p.ID) || strings.Contains(r.stderr, "drop it") {
		t.Errorf("dry run of a second move to the first one's target: exit %d\n%s", r.code, r.stderr)
	}
	start := time.Now()
	r = c.run(nil, "plan", "watch", p.ID, "--every", "200ms")
	if r.code != 3 || !strings.Contains(r.stderr, "is not running") || !strings.Contains(r.stderr, "plan resume "+p.ID) || time.Since(start) > 30*time.Second {
		t.Errorf("watch of a plan no process runs: exit %d after %s\n%s", r.code, time.Since(start).Round(time.Millisecond), r.stderr)
	}
	c.mustRun("plan", "abort", p.ID)
}

// Issue 53: of two processes resuming or aborting one plan stopped after its
// fence, exactly one works. The other read the plan before the first took
// the plan's lock, and gets the lock once the first is done (held here at
// hold:lock:plan, as the few seconds GET_LOCK waits let it through on a
// quick cutover): it exits 4 naming the process that finished the plan, and
// changes nothing; the plan keeps the winner's recorded result.
func TestConcurrentResumesOfOnePlan(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_resume2", []int{1}, []int{200})
	for i, tc := range []struct {
		to    int
		loser []string
	}{
		{3, []string{"plan", "resume", "", "-o", "json"}},
		{2, []string{"plan", "abort", ""}},
	} {
		id := c.killedRun("after:fence", []string{"move", "--shard", "1", "--to", c.env.Addr(tc.to).String(), "--yes"}, planFiles(t, c.planDir))
		loser := append([]string(nil), tc.loser...)
		loser[2] = id
		hold, done, out := startHeld(t, c, "lock:plan", "", loser) // it has read the plan, stopped after its fence
		won := c.mustRun("plan", "resume", id, "-o", "json")
		path := plans.Path(c.planDir, id)
		p, err := plans.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if p.State != plans.StateDone || !strings.HasPrefix(p.RunBy, "pid ") {
			t.Fatalf("case %d: the winner left plan %s %s, run by %q", i, id, p.State, p.RunBy)
		}
		before, _ := os.ReadFile(path)
		m := c.mapJSON()
		if err := os.Remove(hold); err != nil {
			t.Fatal(err)
		}
		code := exitWithin(t, done, 2*time.Minute)
		msg := out.String()
		if code != 4 || !strings.Contains(msg, "plan "+id+" is done already: another process ("+p.RunBy+") finished it") || !strings.Contains(msg, "nothing was changed here") {
			t.Fatalf("case %d: %s while another resume finished the plan: exit %d, want 4 naming %s:\n%s", i, strings.Join(loser, " "), code, p.RunBy, msg)
		}
		if after, _ := os.ReadFile(path); string(after) != string(before) {
			t.Fatalf("case %d: the loser rewrote the plan file", i)
		}
		if row, err := planstore.New(c.store.DB, c.name).Get(ctx, id); err != nil || row.Revision != p.Revision || row.State != plans.StateDone {
			t.Fatalf("case %d: the plans table's copy after the loser: %+v %v", i, row, err)
		}
		if after := c.mapJSON(); after != m {
			t.Fatalf("case %d: the loser changed the shard map:\nbefore %s\nafter  %s", i, m, after)
		}
		var res struct {
			Result plans.Result `json:"result"`
		}
		if err := json.Unmarshal([]byte(won.stdout), &res); err != nil || res.Result.BlackoutMS != p.Result.BlackoutMS || res.Result.RowsDeleted != p.Result.RowsDeleted {
			t.Fatalf("case %d: the recorded result %+v is not the winner's %+v (%v)", i, p.Result, res.Result, err)
		}
		c.wantShardAt(1, tc.to)
	}
}
