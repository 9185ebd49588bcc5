package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// Issue 31: while a move runs (held before its cutover), hand edits of its
// shard and its target copy are refused with the map unchanged, and a second
// 'plan resume' says another process runs the plan. A location slipped in by
// SQL at the target copy stops the cutover with that row named, the fence
// lifted and the shard online; removing it and resuming finishes the move.
func TestShardMapEditsDuringAMove(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_mapedit", []int{1}, []int{300})
	s3, schema := c.env.Addr(3), c.shards[0].Schema
	postpone := filepath.Join(c.dir, "postpone")
	if err := os.WriteFile(postpone, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bg := c.start("move", "--shard", "1", "--to", s3.String(), "--yes", "--postpone-cutover-file", postpone)
	id := planID(waitPlanStep(t, c.planDir, plans.StepVerify))

	before := c.mapJSON()
	for _, args := range [][]string{
		{"shardmap", "add-shard", "--server", s3.String(), "--schema", schema},
		{"shardmap", "set-status", "--shard", "1", "offline"},
		{"shardmap", "add-range", "--function", "employees", "--lower", "-100", "--shard", "1"},
	} {
		r := c.run(nil, args...)
		out := r.stdout + r.stderr
		if r.code != 2 || !strings.Contains(out, "plan "+id) || !strings.Contains(out, "plan watch "+id) || !strings.Contains(out, "nothing was changed") {
			t.Errorf("%s during the move: exit %d, want 2 naming plan %s and 'plan watch':\n%s", strings.Join(args, " "), r.code, id, out)
		}
	}
	if after := c.mapJSON(); after != before {
		t.Fatalf("a refused edit changed the shard map:\nbefore %s\nafter  %s", before, after)
	}

	// The loser of a concurrent resume: exit 4, nothing to do, no "continue it".
	r := c.run(nil, "plan", "resume", id)
	if r.code != 4 || !strings.Contains(r.stderr, "another process is working on plan "+id) || !strings.Contains(r.stderr, "nothing needs doing") ||
		strings.Contains(r.stderr, "continue it with") || strings.Contains(r.stderr, "stopped at step") {
		t.Fatalf("a second resume while the move runs: exit %d, want 4 saying another process runs it:\n%s", r.code, r.stderr)
	}

	// A location registered behind shardctl's back where the cutover puts the shard.
	res, err := c.db(1).Exec("INSERT INTO "+dbutil.Table(c.name, "locations")+" (host, port, schema_name) VALUES (?, ?, ?)", s3.Host, s3.Port, schema)
	if err != nil {
		t.Fatal(err)
	}
	stray, _ := res.LastInsertId()
	if err := os.Remove(postpone); err != nil {
		t.Fatal(err)
	}
	r = bg.wait(t, 2*time.Minute)
	want := fmt.Sprintf("shard %d's location (registered by hand", stray)
	if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, fmt.Sprintf("shardctl shardmap remove-shard --shard %d", stray)) ||
		!strings.Contains(r.stderr, "fence is lifted") || strings.Contains(r.stderr, "remove them") {
		t.Fatalf("cutover onto a hand-registered location: exit %d, want 1 naming shard %d's location and the command that removes it:\n%s", r.code, stray, r.stderr)
	}
	if m := c.mapJSON(); strings.Contains(m, `"offline"`) {
		t.Fatalf("shard 1 left offline: %s", m)
	}
	if _, err := c.db(1).Exec("UPDATE " + dbutil.Table(schema, "employees") + " SET last_name = last_name ORDER BY emp_no LIMIT 1"); err != nil {
		t.Fatalf("shard 1 left fenced at its source: %v", err)
	}
	c.wantShardAt(1, 1)

	// A resume with the location still there stops before it fences again.
	r = c.run(nil, "plan", "resume", id)
	if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "step fence") || strings.Contains(c.mapJSON(), `"offline"`) {
		t.Fatalf("resume with the hand-registered location in place: exit %d, want 1 at the fence step naming it, shard 1 online:\n%s", r.code, r.stderr)
	}
	// The way out the message names.
	c.mustRun("shardmap", "remove-shard", "--shard", fmt.Sprint(stray))
	c.mustRun("plan", "resume", id)
	c.wantShardAt(1, 3)
}

// Issue 31: 'plan abort' of a finished split advises the merge that undoes
// it (never a move of the split shard to the server it is on), and that
// merge runs.
func TestAbortAdviceAfterASplit(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_splitundo", []int{1}, []int{200})
	c.mustRun("split", "--shard", "1", "--to", c.env.Addr(2).String(), "--yes")
	id := planID(planFiles(t, c.planDir)[0])
	p, err := plans.Load(plans.Path(c.planDir, id))
	if err != nil {
		t.Fatal(err)
	}
	r := c.run(nil, "plan", "abort", id)
	advice := regexp.MustCompile(`shardctl merge --shard (\d+) --into 1\b`).FindStringSubmatch(r.stderr)
	if r.code != 2 || advice == nil || advice[1] != fmt.Sprint(p.Target.ShardID) || strings.Contains(r.stderr, "shardctl move") {
		t.Fatalf("abort of a finished split: exit %d, want 2 advising 'shardctl merge --shard %d --into 1':\n%s", r.code, p.Target.ShardID, r.stderr)
	}
	c.mustRun("merge", "--shard", advice[1], "--into", "1", "--yes")
	c.wantShardAt(1, 1)

	// And the merge's undo is the split again, at the split point.
	var mergeID string
	for _, f := range planFiles(t, c.planDir) {
		if strings.HasPrefix(planID(f), "merge-") {
			mergeID = planID(f)
		}
	}
	r = c.run(nil, "plan", "abort", mergeID)
	want := fmt.Sprintf("shardctl split --shard 1 --at %s --to %s", p.Args["at"], c.env.Addr(2))
	if r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Fatalf("abort of a finished merge: exit %d, want 2 advising %q:\n%s", r.code, want, r.stderr)
	}
	c.mustRun(append(strings.Fields(strings.TrimPrefix(want, "shardctl ")), "--yes")...)
	if o := c.ownership(); len(o) != 2 {
		t.Fatalf("after the advised split: shards %v, want two", o)
	}
}

// Issue 31: a move stopped at a schema change (--on-ddl stop) advises the
// resume with --on-ddl apply, which carries the change, or the abort; never
// the plain resume, which stops at the statement again; the advice works.
func TestDDLStopAdvice(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_ddladvice", []int{2}, []int{300})
	postpone, done, _, stderr := startHeldMoveOut(t, c, "stop")
	id := planID(planFiles(t, c.planDir)[0])
	s := c.shards[0].Schema
	if _, err := c.db(2).Exec("ALTER TABLE " + dbutil.Table(s, "employees") + " ADD COLUMN nickname VARCHAR(20) NULL"); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if out := stderr.String(); code != 1 || !strings.Contains(out, "shardctl plan abort "+id) || !strings.Contains(out, "'shardctl plan resume "+id+" --on-ddl apply' carries it") ||
			strings.Contains(out, "continue it with") {
			t.Fatalf("a move stopped at a carriable ALTER: exit %d, want 1 advising the resume with --on-ddl apply or the abort, never a plain resume:\n%s", code, out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the move did not stop within 2 minutes of the ALTER")
	}
	if err := os.Remove(postpone); err != nil {
		t.Fatal(err)
	}
	// The advice holds: a plain resume stops at the statement again; the
	// resume with --on-ddl apply carries it and cuts over.
	if r := c.run(nil, "plan", "resume", id); r.code != 1 || strings.Contains(r.stderr, "continue it with") {
		t.Fatalf("plain resume of a plan stopped at a schema change: exit %d, want 1 with the same advice:\n%s", r.code, r.stderr)
	}
	c.mustRun("plan", "resume", id, "--on-ddl", "apply")
	c.wantShardAt(1, 3)
	var n int
	if err := c.db(3).QueryRow("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'employees' AND COLUMN_NAME = 'nickname'", s).Scan(&n); err != nil || n != 1 {
		t.Fatalf("nickname on the target after the resume: %d %v", n, err)
	}
}
