package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/sandbox"
)

// adviceCmd is a command in a message: 'shardctl ...' up to a quote, a
// parenthesis, a semicolon or the line's end.
var adviceCmd = regexp.MustCompile(`shardctl [a-z][^'()\n;]*`)

// advice is every command a refusal's or stop's output names.
func advice(out string) []string {
	var cmds []string
	for _, m := range adviceCmd.FindAllString(out, -1) {
		cmds = append(cmds, strings.TrimRight(strings.TrimSpace(m), ".,:"))
	}
	return cmds
}

// runAdvice runs a printed command as printed (through the shell: its
// quoting is part of it), with --dry-run for the operations that change
// the fleet, and wants exit 0.
func (c *cluster) runAdvice(from, cmd string) result {
	c.t.Helper()
	words := strings.Fields(cmd)
	line := strings.Replace(cmd, "shardctl ", bin+" --config "+c.config+" ", 1)
	switch words[1] {
	case "move", "split", "merge", "prune", "rebalance":
		line += " --dry-run"
	}
	out, err := exec.Command("sh", "-c", line).CombinedOutput()
	r := result{stdout: string(out)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	if r.code != 0 {
		c.t.Errorf("the advice of %s, %q: exit %d\n%s", from, cmd, r.code, out)
	}
	return r
}

// refused runs args, wants exit 2 with hint and without not, nothing
// changed (but where a reverse window's process keeps its plan's lag
// current), and returns the commands its message names.
func (c *cluster) refused(hint, not string, args ...string) []string {
	c.t.Helper()
	return c.refusedIn(true, hint, not, args...)
}

func (c *cluster) refusedIn(steady bool, hint, not string, args ...string) []string {
	c.t.Helper()
	state := func() string {
		if !steady {
			return c.mapJSON()
		}
		return catState(c.t, c)
	}
	before := state()
	r := c.run(nil, args...)
	out := r.stdout + r.stderr
	if r.code != 2 || !strings.Contains(out, hint) || not != "" && strings.Contains(out, not) {
		c.t.Fatalf("%s: exit %d, want 2 saying %q (and not %q):\n%s", strings.Join(args, " "), r.code, hint, not, out)
	}
	if after := state(); after != before {
		c.t.Errorf("%s changed the state:\n%s", strings.Join(args, " "), lineDiff(before, after))
	}
	return advice(out)
}

// TestAdviceRuns drives the refusals and aborts of issue 53 on a LIST fleet
// and runs every command their messages name, as printed (in --dry-run
// where it changes the fleet), wanting exit 0: the undo of a done key move
// and of a LIST merge, the way out of a key move's open reverse window, the
// merge rebalance leaves to the operator, the online a key move into an
// offline shard needs, and a stopped plan's resume and abort.
func TestAdviceRuns(t *testing.T) {
	testenv.FlavorNeutralInMySQLPass(t)
	c := newClusterSeed(t, "e2e_catadv", []int{1, 2, 3}, sandbox.SeedConfig{Sizes: []int{60, 60, 60}, List: true})
	k1, k3 := c.shards[0].Lower, c.shards[2].Lower
	key := func(k int64) string { return fmt.Sprint(k) }
	s3 := c.env.Addr(3).String()

	// A key move inside its reverse window: the way back is the window's.
	mv := c.startBG(nil, "move", "--shard", "1", "--keys", key(k1+1)+","+key(k1+2), "--into", "2", "--yes", "--reverse-window", "3m", "--max-blackout", "5s")
	id := c.waitWin("the window", 90*time.Second, mv, inWindow(plans.SideTarget, time.Now())).ID
	win := c.refusedIn(false, "plan revert "+id, "prune", "move", "--shard", "2", "--keys", key(k1+1), "--into", "1", "--dry-run")
	win = append(win, c.refusedIn(false, "plan complete "+id, "", "plan", "abort", id)...)
	if len(win) < 4 {
		t.Errorf("the window's refusals name %q, want its revert and complete each", win)
	}
	for _, cmd := range win {
		if !strings.Contains(cmd, id) {
			t.Errorf("the window's advice names a command not about plan %s: %q", id, cmd)
		}
	}
	c.runAdvice("the window", "shardctl plan revert "+id)
	c.waitWin("the tail to the target", 90*time.Second, mv, inWindow(plans.SideSource, time.Now()))
	c.runAdvice("the window", "shardctl plan complete "+id)
	if code := mv.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("the windowed key move: exit %d\n%s", code, mv.err.String())
	}

	// rebalance does not merge LIST shards: an unmet limit, with the merge.
	r := c.run(nil, "rebalance", "--min-shard-rows", "1000000", "-o", "json")
	var rep struct {
		Unmet []struct{ Why string } `json:"unmet"`
	}
	json.Unmarshal([]byte(r.stdout), &rep)
	if r.code != 2 || len(rep.Unmet) == 0 || !strings.Contains(rep.Unmet[0].Why, "does not merge LIST shards") {
		t.Fatalf("rebalance --min-shard-rows on LIST shards: exit %d, want 2 with an unmet entry\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, cmd := range advice(rep.Unmet[0].Why) {
		c.runAdvice("rebalance's unmet", cmd)
	}

	// A key move into a shard set offline is refused; the online it names runs.
	c.mustRun("shardmap", "set-status", "--shard", "3", "offline")
	online := c.refused("is offline", "", "move", "--shard", "1", "--keys", key(k1+20), "--into", "3", "--dry-run")
	if len(online) == 0 {
		t.Fatal("the offline refusal names no command")
	}
	for _, cmd := range online {
		c.runAdvice("the offline refusal", cmd)
	}
	if cmds := c.refused("give --keys K1,K2 (the tenants that move", "one range or ring point", "split", "--shard", "1", "--to", s3, "--dry-run"); len(cmds) != 0 {
		t.Errorf("a split without --keys names commands: %q", cmds)
	}

	// A done key move's and a done LIST merge's undo.
	done := func(args ...string) string {
		c.t.Helper()
		r := c.mustRun(append(args, "--yes", "-o", "json")...)
		var out struct {
			PlanID string `json:"plan_id"`
		}
		json.Unmarshal([]byte(r.stdout), &out)
		return out.PlanID
	}
	moved := done("move", "--shard", "1", "--keys", key(k1+3)+","+key(k1+4)+","+key(k1+5)+","+key(k1+9), "--into", "2")
	merged := done("merge", "--shard", "3", "--into", "2")
	for hint, id := range map[string]string{"--keys " + key(k1+3) + ".." + key(k1+5) + "," + key(k1+9) + " --into 1": moved, "--keys " + key(k3+1) + ".." + key(k3+120) + " --to " + s3: merged} {
		undo := c.refused(hint, "(--keys or", "plan", "abort", id)
		if len(undo) != 1 {
			t.Errorf("the abort of %s names %q, want its undo", id, undo)
		}
		for _, cmd := range undo {
			if r := c.runAdvice("the abort of "+id, cmd); !strings.Contains(r.stdout, "dry run: nothing was changed") {
				t.Errorf("%q is no dry run:\n%s", cmd, r.stdout)
			}
		}
	}

	// A key move stopped before its cutover: its resume and its abort run.
	for _, verb := range []string{"abort", "resume"} {
		r := c.run([]string{"SHARDCTL_FAULT=fail:fence:ready"}, "move", "--shard", "1", "--keys", key(k1+30), "--into", "2", "--yes", "--cutover-attempts", "1", "--retry-for", "0")
		var cmd string
		for _, a := range advice(r.stderr) {
			if strings.HasPrefix(a, "shardctl plan "+verb+" ") {
				cmd = a
			}
		}
		if r.code != 3 || cmd == "" {
			t.Fatalf("the stopped key move: exit %d, want 3 naming 'shardctl plan %s'\n%s", r.code, verb, r.stderr)
		}
		r = c.runAdvice("the stopped key move", cmd)
		// Into an existing shard, an abort removes only the rows it copied.
		if verb == "abort" && (!strings.Contains(r.stdout, "the rows it copied into shard 2") || strings.Contains(r.stdout, "target copy is removed")) {
			t.Errorf("the abort of a key move into shard 2 does not say only the copied rows are removed:\n%s", r.stdout)
		}
	}

	// Killed past its cleanup: doctor names where it stands (not an empty
	// step) and the resume that ends it, which runs.
	if r := c.run([]string{"SHARDCTL_FAULT=after:cleanup"}, "move", "--shard", "1", "--keys", key(k1+31), "--into", "2", "--yes"); !r.killed {
		t.Fatalf("the key move was not killed after its cleanup: exit %d\n%s", r.code, r.stderr)
	}
	r = c.run(nil, "doctor", "-o", "json")
	var doc struct {
		Findings []struct{ Kind, What, Command, Alternative string }
	}
	json.Unmarshal([]byte(r.stdout), &doc)
	if r.code != 1 || len(doc.Findings) == 0 {
		t.Fatalf("doctor after a kill past cleanup: exit %d, want 1 with a finding\n%s%s", r.code, r.stdout, r.stderr)
	}
	stopped := 0
	for _, f := range doc.Findings {
		if f.Kind != "plan-stopped" {
			continue
		}
		stopped++
		if strings.Contains(f.What, "at step ,") || strings.Contains(f.What, "step  ") || !strings.Contains(f.What, "every step done") {
			t.Errorf("doctor's finding does not say where the plan stands: %s", f.What)
		}
		for _, cmd := range advice(f.Command + "\n" + f.Alternative) {
			c.runAdvice("doctor's "+f.Kind, cmd)
		}
	}
	if stopped != 1 {
		t.Errorf("doctor lists %d stopped plans, want the one killed:\n%s", stopped, r.stdout)
	}
	if r := c.run(nil, "doctor"); r.code != 0 {
		t.Errorf("doctor after its command ran: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
