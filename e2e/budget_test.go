package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/watermark"
)

// background runs shardctl without waiting; wait() returns its result.
type background struct {
	cmd  *exec.Cmd
	done chan result
}

func (c *cluster) start(args ...string) *background {
	cmd := c.command(nil, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	b := &background{cmd: cmd, done: make(chan result, 1)}
	go func() {
		err := cmd.Wait()
		r := result{stdout: out.String(), stderr: errb.String()}
		if cmd.ProcessState != nil {
			r.code = cmd.ProcessState.ExitCode()
		}
		_ = err
		b.done <- r
	}()
	c.t.Cleanup(func() { _ = cmd.Process.Kill() })
	return b
}

func (b *background) wait(t *testing.T, limit time.Duration) result {
	t.Helper()
	select {
	case r := <-b.done:
		return r
	case <-time.After(limit):
		t.Fatalf("shardctl still running after %s\n%s", limit, b.dump())
	}
	return result{}
}

// dump ends a run that seems stuck with SIGQUIT, so its log ends with
// every goroutine's stack, and returns the end of its output.
func (b *background) dump() string {
	_ = b.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case r := <-b.done:
		out := r.stdout + "\n" + r.stderr
		return out[max(0, len(out)-30000):]
	case <-time.After(10 * time.Second):
		return "(no output: the process did not end on SIGQUIT)"
	}
}

// currentPlan reads the one plan in the plan directory (nil while none is written).
func (c *cluster) currentPlan() *plans.Plan {
	files := planFiles(c.t, c.planDir)
	if len(files) != 1 {
		return nil
	}
	p, err := plans.Load(files[0])
	if err != nil {
		return nil // being replaced: read again
	}
	return p
}

func (c *cluster) waitPlan(t *testing.T, what string, ok func(*plans.Plan) bool) *plans.Plan {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if p := c.currentPlan(); p != nil && ok(p) {
			return p
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("plan never reached: %s", what)
	return nil
}

// A writer holding a transaction on the shard: the cutover cannot fit its
// budget, backs off and leaves the shard online; once the transaction ends it succeeds.
func TestCutoverBacksOffBehindALongTransaction(t *testing.T) {
	c := newCluster(t, "e2e_budget", []int{1, 1}, []int{500, 200})
	tx, err := c.db(1).Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	key := c.shards[0].Lower + 10
	if _, err := tx.Exec("UPDATE "+dbutil.Table(c.shards[0].Schema, "employees")+" SET last_name = 'LongTrx' WHERE emp_no = ?", key); err != nil {
		t.Fatal(err)
	}
	bg := c.start("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "300ms",
		"--cutover-backoff", "200ms", "--cutover-attempts", "40", "-o", "json")
	p := c.waitPlan(t, "a backed-off cutover attempt", func(p *plans.Plan) bool {
		for _, a := range p.Attempts {
			if strings.HasPrefix(a.Result, "backed off") {
				return true
			}
		}
		return false
	})
	for _, a := range p.Attempts {
		if !strings.HasPrefix(a.Result, "postponed") && !strings.HasPrefix(a.Result, "backed off") && a.Result != "fencing" {
			t.Fatalf("attempt while the transaction is open: %+v", a)
		}
		if a.BlackoutM > 1000 {
			t.Errorf("an attempt blacked out %.0f ms, over the 300 ms budget (with slack)", a.BlackoutM)
		}
	}
	// Between attempts the shard is online at the source: another key is writable.
	m, _ := c.store.Load(ctx)
	if l, _ := m.Location(1); l.Addr() != c.env.Addr(1) {
		t.Fatalf("shard moved while the transaction is open")
	}
	if _, err := c.db(1).Exec("UPDATE " + dbutil.Table(c.shards[0].Schema, "departments") + " SET dept_name = dept_name WHERE dept_no = 'd001'"); err != nil {
		t.Logf("note: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := bg.wait(t, 90*time.Second)
	if r.code != 0 {
		t.Fatalf("move after the transaction ended: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var sum struct {
		State    string          `json:"state"`
		Attempts []plans.Attempt `json:"cutover_attempts"`
	}
	json.Unmarshal([]byte(r.stdout), &sum)
	if sum.State != "done" || len(sum.Attempts) < 2 || sum.Attempts[len(sum.Attempts)-1].Result != "cut over" {
		t.Fatalf("summary: %s", r.stdout)
	}
	// The transaction's write reached the target.
	var ln string
	c.db(3).QueryRow("SELECT last_name FROM "+dbutil.Table(c.shards[0].Schema, "employees")+" WHERE emp_no = ?", key).Scan(&ln)
	if ln != "LongTrx" {
		t.Fatalf("the long transaction's write is not on the target: %q", ln)
	}
	r2 := c.mustRun("plan", "show", planFiles(t, c.planDir)[0])
	if !strings.Contains(r2.stdout, "cutover attempts:") {
		t.Errorf("plan show lacks the attempts:\n%s", r2.stdout)
	}
}

// A throttled copy goes at the set rate (rows over time, generous bounds).
func TestThrottledCopy(t *testing.T) {
	c := newCluster(t, "e2e_throttle", []int{1}, []int{1000}) // about 9,000 rows
	rows := c.shards[0].Rows
	r := c.mustRun("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-rate", "3000", "--chunk-rows", "300", "--no-verify", "-o", "json")
	var sum struct {
		Result plans.Result `json:"result"`
	}
	json.Unmarshal([]byte(r.stdout), &sum)
	secs := sum.Result.StepSeconds["copy"]
	rate := float64(sum.Result.RowsCopied) / secs
	t.Logf("%d rows copied in %.2f s: %.0f rows/s (cap 3000)", sum.Result.RowsCopied, secs, rate)
	if sum.Result.RowsCopied < rows || rate > 3000*1.5 || rate < 300 {
		t.Fatalf("throttled copy: %d of %d rows at %.0f rows/s", sum.Result.RowsCopied, rows, rate)
	}
}

// The postpone file holds the cutover; deleting it releases it.
func TestPostponeFileHoldsTheCutover(t *testing.T) {
	c := newCluster(t, "e2e_postpone", []int{1}, []int{300})
	flag := filepath.Join(c.dir, "postpone")
	os.WriteFile(flag, nil, 0o600)
	bg := c.start("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--postpone-cutover-file", flag)
	c.waitPlan(t, "fence step running", func(p *plans.Plan) bool { return p.Step(plans.StepFence).State == plans.Running })
	time.Sleep(1500 * time.Millisecond)
	p := c.currentPlan()
	if p == nil || len(p.Attempts) != 0 || p.CutOver() {
		t.Fatalf("cutover went ahead while the postpone file exists: %+v", p)
	}
	m, _ := c.store.Load(ctx)
	if mp := m.ShardMappings(1)[0]; mp.Status != "online" {
		t.Fatal("mapping offline while postponed")
	}
	os.Remove(flag)
	r := bg.wait(t, 60*time.Second)
	if r.code != 0 {
		t.Fatalf("after removing the postpone file: exit %d %s", r.code, r.stderr)
	}
	m, _ = c.store.Load(ctx)
	if l, _ := m.Location(1); l.Addr() != c.env.Addr(3) {
		t.Fatal("not moved")
	}
}

// Under writers going as fast as they can, chunks of the moving keys never
// match a target a few milliseconds behind: verify defers them, and they are
// compared exactly behind the fence, within the blackout budget.
func TestMoveUnderFullRateWriters(t *testing.T) {
	c := newCluster(t, "e2e_fullrate", []int{1, 1}, []int{600, 200})
	lp := c.startLoad(0, c.keys("hot", 1, 600), c.keys("other", 2, 200))
	budget := "400ms"
	if testenv.MySQL() {
		// MySQL has no SET STATEMENT: a statement time limit (KILL QUERY from
		// another session) or lock_wait_timeout costs round trips of their own.
		budget = "1s"
	}
	r := c.run(nil, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--chunk-rows", "200", "--max-blackout", budget, "-o", "json")
	st := lp.stop(t)
	if r.code != 0 {
		t.Fatalf("move under full-rate writers: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var sum struct {
		Attempts []plans.Attempt `json:"cutover_attempts"`
	}
	json.Unmarshal([]byte(r.stdout), &sum)
	t.Logf("load %d writes, attempts %+v", st.Acked, sum.Attempts)
	if g := st.Groups["other"]; g.Errors != 0 || g.Retries != 0 {
		t.Errorf("other shard: %+v", g)
	}
	if st.Groups["hot"].Errors != 0 {
		t.Errorf("hot keys: %+v", st.Groups["hot"])
	}
	c.checkLedger(lp)
}

// A fence step that stops with its triggers armed (here readiness fails, as
// when the binlog tail loses the target) lifts them: the shard stays online
// and writable at the source, and a resume cuts over.
func TestStoppedFenceStepLiftsTheArmedFence(t *testing.T) {
	c := newCluster(t, "e2e_fencestop", []int{1}, []int{300})
	r := c.run([]string{"SHARDCTL_FAULT=fail:fence:ready"}, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "-o", "json", "--retry-for", "0")
	if r.code == 0 || r.killed {
		t.Fatalf("the move exited %d (killed %v) with its readiness check failing; want a stopped plan\n%s", r.code, r.killed, r.stderr)
	}
	fenceLifted(t, c, 1)
	if _, err := c.db(1).Exec("UPDATE "+dbutil.Table(c.shards[0].Schema, "employees")+" SET last_name = last_name WHERE emp_no = ?", c.shards[0].Lower+1); err != nil {
		t.Fatalf("a write to the shard at the source after the stopped fence step: %v", err)
	}
	p := c.currentPlan()
	if p == nil || p.Done(plans.StepFence) {
		t.Fatalf("want the plan stopped before the end of its fence step: %+v", p)
	}
	c.mustRun("plan", "resume", p.ID)
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := m.Location(1); l.Addr() != c.env.Addr(3) {
		t.Errorf("shard 1 is at %s after the resume, want %s", l.Addr(), c.env.Addr(3))
	}
}

// A merge whose recheck behind the fence finds a difference stops with
// exit 5, the attempt backed off and lifted: the shard is online and
// writable at its source, nothing cut over. (The recheck gets the budget
// left less the lift's reserve: pipeline's TestBlackoutRecheckLeavesRoomToLift.)
func TestRecheckDifferenceBacksOffAndLifts(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_recheckdiff", []int{1, 2}, []int{200, 200})
	args := []string{"merge", "--shard", "2", "--into", "1", "--yes"}
	id := c.killedRun("after:verify", args, nil)
	// A chunk deferred to the fence, and a row of it that differs on the
	// target (written there by hand): the recheck behind the fence finds it.
	path := plans.Path(c.planDir, id)
	p, err := plans.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p.Checkpoints.Deferred = append(p.Checkpoints.Deferred, watermark.Range{Table: "employees"})
	if err := plans.Save(path, p); err != nil {
		t.Fatal(err)
	}
	moved := c.shards[1].Lower + 5
	if _, err := c.db(1).Exec("UPDATE "+dbutil.Table(c.shards[0].Schema, "employees")+" SET last_name = 'Differs' WHERE emp_no = ?", moved); err != nil {
		t.Fatal(err)
	}
	r := c.run(nil, "plan", "resume", id, "-o", "json")
	if r.code != 5 || !strings.Contains(r.stderr, "differ behind the fence") {
		t.Fatalf("resume with a difference behind the fence: exit %d, want 5 naming it\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	p, err = plans.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.CutOver() || len(p.Attempts) == 0 || !strings.HasPrefix(p.Attempts[len(p.Attempts)-1].Result, "backed off: ") {
		t.Fatalf("after the difference: cut over %v, attempts %+v; want the last attempt backed off", p.CutOver(), p.Attempts)
	}
	t.Logf("the attempt that found the difference: %.1f ms (%v)", p.Attempts[len(p.Attempts)-1].BlackoutM, p.Attempts[len(p.Attempts)-1].Phases)
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range m.ShardMappings(2) {
		if mp.Status != "online" {
			t.Errorf("shard 2's mapping %s is %s after the attempt backed off", mp, mp.Status)
		}
	}
	// The fence is lifted: the source takes writes to the moving rows.
	if _, err := c.db(2).Exec("UPDATE "+dbutil.Table(c.shards[1].Schema, "employees")+" SET last_name = 'Written' WHERE emp_no = ?", moved); err != nil {
		t.Fatalf("a write to a moving row at the source after the attempt backed off: %v", err)
	}
}
