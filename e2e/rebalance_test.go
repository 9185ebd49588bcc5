package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

type rebalanceOut struct {
	Proposed []struct {
		Operation string `json:"operation"`
		Shard     int    `json:"shard_id"`
		Into      int    `json:"into"`
		To        string `json:"to"`
	} `json:"proposed"`
	Planned   []struct{ Summary, Error string } `json:"planned"`
	Continued []item                            `json:"continued"`
	Started   []item                            `json:"started"`
	Finished  []item                            `json:"finished"`
	Left      []item                            `json:"left"`
}

type item struct {
	PlanID    string `json:"plan_id"`
	Operation string `json:"operation"`
	State     string `json:"state"`
	Error     string `json:"error"`
}

// hasPlan reports whether a plan of operation op is running step in the plan directory.
func (c *cluster) hasPlan(step, op string) bool {
	for _, f := range planFiles(c.t, c.planDir) {
		if p, err := plans.Load(f); err == nil && p.Operation == op && p.Step(step).State == plans.Running {
			return true
		}
	}
	return false
}

func (r rebalanceOut) ops() string {
	var s []string
	for _, p := range r.Proposed {
		s = append(s, p.Operation)
	}
	return strings.Join(s, ",")
}

// Rebalance from cron under the ledger load: five uneven range shards on
// three servers (the third empty). A dry run changes nothing; an apply
// killed mid-copy is finished by the next run (a split, a merge and a move);
// a third run finds nothing to do; --drain empties a server; the ledger is
// clean and no row changed.
func TestRebalanceFromCron(t *testing.T) {
	testenv.FlavorNeutralInMySQLPass(t)
	c := newCluster(t, "e2e_rebal", []int{1, 2, 2, 1, 1, 1, 2, 2}, []int{1000, 100, 100, 300, 300, 300, 300, 300})
	for i, s := range c.shards {
		t.Logf("shard %d: %d rows on %s", i+1, s.Rows, s.Server)
	}
	groups := []string{c.keys("big", 1, 1000), c.keys("small", 3, 100), c.keys("mid", 4, 300)}
	before := c.fleetSums(groups)
	// Server 1 ends the split at about 0.52 of the rows; 0.45 leaves the
	// move needed by some 1,600 rows whatever the ledger load deletes
	// (each delete cascades to an employee's rows) in a slow run. At 0.5 the
	// margin was about 400 rows: one suspect of the rare "the second run
	// never started the move" (its output is now printed when it happens).
	policy := []string{"rebalance", "--max-shard-rows", "6000", "--min-shard-rows", "2000", "--max-server-share", "0.45",
		"--server", c.env.Addr(3).String(), "--exact", "--concurrency", "2", "--chunk-rows", "200", "--max-blackout", "5s", "-o", "json"}
	lp := c.startLoad(60, groups...)

	v0, _ := c.store.Version(ctx)
	var dry rebalanceOut
	r := c.mustRun(policy...)
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil {
		t.Fatalf("dry run output: %v\n%s", err, r.stdout)
	}
	if dry.ops() != "split,merge,move" || len(dry.Planned) != 3 {
		t.Fatalf("dry run proposal: %s\n%s", dry.ops(), r.stdout)
	}
	for _, p := range dry.Planned {
		if p.Error != "" || p.Summary == "" {
			t.Errorf("dry run plan: %+v", p)
		}
	}
	if v1, _ := c.store.Version(ctx); v1 != v0 || len(planFiles(t, c.planDir)) != 0 {
		t.Fatalf("the dry run changed something: version %d -> %d, plan files %v", v0, v1, planFiles(t, c.planDir))
	}

	// Cron, first run: killed in the split's copy. One operation at a time,
	// so the kill always finds the split's plan saved: with two at once the
	// merge could reach its copy (and the kill) before the split was even
	// planned, and the next run then started the split afresh with its
	// --postpone-cutover-file, holding it at its cutover while the move
	// waited for its server: "the second run never started the move".
	r = c.run([]string{"SHARDCTL_FAULT=during:copy"}, append(policy, "--apply", "--concurrency", "1")...)
	if !r.killed {
		t.Fatalf("not killed: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// Cron, next run: continues the stopped plans, then the move. The
	// postpone file holds the first of its operations to reach a cutover
	// (the run's settings apply to the plans it continues too, so that may
	// be the continued split, which keeps the move waiting for its server)
	// while another rebalance is refused.
	hold := filepath.Join(c.dir, "hold")
	os.WriteFile(hold, nil, 0o600)
	bg := c.start(append(policy, "--apply", "--postpone-cutover-file", hold)...)
	deadline := time.Now().Add(90 * time.Second)
	for !c.hasPlan(plans.StepFence, "move") && !c.hasPlan(plans.StepFence, "split") && !c.hasPlan(plans.StepFence, "merge") {
		if time.Now().After(deadline) {
			var state []string
			for _, f := range planFiles(t, c.planDir) {
				if p, err := plans.Load(f); err == nil {
					state = append(state, fmt.Sprintf("%s %s: %s", p.ID, p.State, p.Summary))
				}
			}
			t.Fatalf("the second run never reached a cutover; plans:\n%s\nthe run's output:\n%s", strings.Join(state, "\n"), bg.dump())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := c.run(nil, append(policy, "--apply")...); r.code != 4 {
		t.Fatalf("a rebalance next to a running one: exit %d, want 4\n%s", r.code, r.stderr)
	}
	os.Remove(hold)
	r = bg.wait(t, 90*time.Second)
	if r.code != 0 {
		t.Fatalf("second run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var second rebalanceOut
	if err := json.Unmarshal([]byte(r.stdout), &second); err != nil {
		t.Fatalf("second run output: %v\n%s", err, r.stdout)
	}
	t.Logf("second run: continued %+v, started %+v, finished %d, left %+v", second.Continued, second.Started, len(second.Finished), second.Left)
	if len(second.Continued) == 0 || len(second.Left) != 0 {
		t.Fatalf("second run: %s", r.stdout)
	}
	done := map[string]int{}
	for _, f := range second.Finished {
		done[f.Operation]++
	}
	if done["split"] != 1 || done["merge"] != 1 || done["move"] != 1 {
		t.Fatalf("finished operations %v, want a split, a merge and a move\n%s", done, r.stdout)
	}
	// Cron, third run: nothing to do.
	var third rebalanceOut
	r = c.mustRun(append(policy, "--apply")...)
	json.Unmarshal([]byte(r.stdout), &third)
	if len(third.Proposed)+len(third.Started)+len(third.Continued) != 0 {
		t.Fatalf("third run did something: %s", r.stdout)
	}
	// Draining server 3 moves its shards to the others.
	drain := c.env.Addr(3).String()
	r = c.mustRun("rebalance", "--drain", drain, "--exact", "--chunk-rows", "200", "--max-blackout", "5s", "-o", "json", "--apply")
	var drained rebalanceOut
	json.Unmarshal([]byte(r.stdout), &drained)
	m, _ := c.store.Load(ctx)
	for _, l := range m.Locations {
		if l.Addr().String() == drain {
			t.Errorf("shard %d still on the drained server: %s", l.ShardID, r.stdout)
		}
	}
	if len(drained.Finished) == 0 || drained.ops() != strings.Repeat("move,", len(drained.Finished)-1)+"move" {
		t.Errorf("drain: %s", r.stdout)
	}
	lp.stop(t)
	c.checkLedger(lp)
	if after := c.fleetSums(groups); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("fleet rows differ:\nbefore %v\nafter  %v", before, after)
	}
	counts := c.ownership()
	t.Logf("rows per shard after: %v", counts)
}

// HASH shards follow the same policy: the big arc is split at its midpoint,
// two small neighbouring points fold into one; a second run does nothing.
func TestRebalanceHashRing(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newClusterOpts(t, "e2e_rebhash", []int{1, 2, 2}, []int{600, 60, 60}, true)
	c.env.NeedMD5(t) // hash arcs: the fence and the copy hash inside the server
	for i, s := range c.shards {
		t.Logf("shard %d: %d rows on %s, point %s", i+1, s.Rows, s.Server, s.Point)
	}
	before := c.fleetSums(nil)
	policy := []string{"rebalance", "--max-shard-rows", "3000", "--min-shard-rows", "1500", "--exact", "--concurrency", "2", "--same-server", "--max-blackout", "5s", "-o", "json", "--apply"}
	var out rebalanceOut
	r := c.mustRun(policy...)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.ops() != "split,merge" || len(out.Finished) != 2 {
		t.Fatalf("hash rebalance: %s", r.stdout)
	}
	r = c.mustRun(policy...)
	out = rebalanceOut{}
	json.Unmarshal([]byte(r.stdout), &out)
	if len(out.Proposed) != 0 {
		t.Fatalf("second run: %s", r.stdout)
	}
	if after := c.fleetSums(nil); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("fleet rows differ:\nbefore %v\nafter  %v", before, after)
	}
	t.Logf("rows per shard after: %v", c.ownership())
}

// Issue 21, items 4 and 6: rebalance tells the truth. A shard over
// --max-shard-rows that an operator's stopped plan keeps busy, a server over
// --max-server-share that no move can fix, and --drain of every server are
// each named with why, and the run exits 2 (outside the policy, nothing
// could be done) instead of 0 "nothing to do". A run's settings flags apply
// to the stopped plans it continues.
func TestRebalanceTellsTheTruth(t *testing.T) {
	testenv.FlavorNeutralInMySQLPass(t)
	c := newCluster(t, "e2e_rebtruth", []int{1, 2}, []int{300, 280})
	s1, s2 := c.env.Addr(1).String(), c.env.Addr(2).String()
	type out struct {
		rebalanceOut
		Unmet []struct {
			Shard  int    `json:"shard_id"`
			Server string `json:"server"`
			Why    string `json:"why"`
		} `json:"unmet"`
	}
	check := func(name string, wantCode int, want string, args ...string) out {
		t.Helper()
		for _, apply := range [][]string{nil, {"--apply"}} {
			before := c.world()
			r := c.run(nil, append(append([]string{"rebalance", "--exact", "-o", "json"}, args...), apply...)...)
			var o out
			if err := json.Unmarshal([]byte(r.stdout), &o); err != nil || r.code != wantCode || !strings.Contains(r.stdout, want) {
				t.Fatalf("%s %v: exit %d (want %d), output without %q (%v)\n%s\n%s", name, apply, r.code, wantCode, want, err, r.stdout, r.stderr)
			}
			if wantCode == 2 && c.world() != before {
				t.Fatalf("%s %v: a rebalance that could do nothing changed something", name, apply)
			}
			if wantCode == 2 {
				t.Logf("%s %v: %s", name, apply, lastLines(r.stderr, 1))
			}
			if apply == nil && wantCode == 0 {
				return o
			}
		}
		return out{}
	}
	check("server over its share, no move fits", 2, "over --max-server-share 50%", "--max-server-share", "0.5")
	check("every server drained", 2, "every server is drained", "--drain", s1, "--drain", s2)

	// An operator's move of shard 1 stopped after its copy: shard 1 is busy.
	r := c.run([]string{"SHARDCTL_FAULT=after:copy"}, "move", "--shard", "1", "--to", s2, "--yes")
	if !r.killed {
		t.Fatalf("move not killed: exit %d\n%s", r.code, r.stderr)
	}
	op := planID(planFiles(t, c.planDir)[0])
	check("busy shard over --max-shard-rows", 2, "busy with plan "+op, "--max-shard-rows", "2550")
	if r := c.mustRun("plan", "abort", op); r.code != 0 {
		t.Fatal(r.stderr)
	}
	os.Remove(filepath.Join(c.planDir, op+".json"))

	// Rebalance's own split, killed after its copy, is continued by the next
	// run with that run's --chunk-rows and --max-blackout.
	r = c.run([]string{"SHARDCTL_FAULT=after:copy"}, "rebalance", "--apply", "--max-shard-rows", "2550", "--exact")
	if !r.killed {
		t.Fatalf("rebalance not killed: exit %d\n%s", r.code, r.stderr)
	}
	files := planFiles(t, c.planDir)
	if len(files) != 1 {
		t.Fatalf("plan files after the killed rebalance: %v", files)
	}
	r = c.run(nil, "rebalance", "--apply", "--max-shard-rows", "2550", "--exact", "--chunk-rows", "777", "--max-blackout", "3s", "-o", "json")
	var o out
	if err := json.Unmarshal([]byte(r.stdout), &o); err != nil || r.code != 0 || len(o.Continued) != 1 {
		t.Fatalf("rebalance continuing its split: exit %d (%v)\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	p, err := plans.Load(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if p.Options.ChunkRows != 777 || p.Options.MaxBlackoutMS.D() != 3*time.Second || p.State != plans.StateDone {
		t.Fatalf("the continued plan kept its saved options: chunk rows %d, max blackout %s, state %s", p.Options.ChunkRows, p.Options.MaxBlackoutMS.D(), p.State)
	}
	if !strings.Contains(r.stdout, "with this run's --chunk-rows=777 --max-blackout=3s") {
		t.Errorf("the report does not say which options the continued plan got:\n%s", r.stdout)
	}
}
