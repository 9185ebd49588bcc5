package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/doctor"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
)

// doctorReport is 'shardctl doctor -o json'.
type doctorReport struct {
	Healthy  bool             `json:"healthy"`
	Found    int              `json:"found"`
	Fixed    int              `json:"fixed"`
	Findings []doctor.Finding `json:"findings"`
}

// doctor runs 'shardctl doctor -o json ARGS' and wants exit code want.
func (c *cluster) doctor(want int, args ...string) doctorReport {
	c.t.Helper()
	r := c.run(nil, append([]string{"doctor", "-o", "json"}, args...)...)
	var rep doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != want {
		c.t.Fatalf("doctor %v: exit %d (want %d), %v\nstdout: %s\nstderr: %s", args, r.code, want, err, r.stdout, r.stderr)
	}
	return rep
}

// locksFreed waits until the server has freed a killed run's named locks.
// It frees them once it sees the connection close, a moment after the kill;
// doctor run before that rightly sees the plan as running (seen once: the
// plan not reported, its lock free by the time doctor read the locks).
func (c *cluster) locksFreed(names []string) {
	c.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		used, err := lock.InUse(ctx, c.store.DB, names)
		if err == nil && !used {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("locks %v still held 10 s after the kill (%v)", names, err)
		}
	}
}

// find returns the finding of kind about plan id or shard (0: any), or fails.
func (d doctorReport) find(t *testing.T, kind, plan string, shard int) doctor.Finding {
	t.Helper()
	for _, f := range d.Findings {
		if f.Kind == kind && (plan == "" || f.PlanID == plan) && (shard == 0 || f.ShardID == shard) {
			return f
		}
	}
	t.Fatalf("doctor did not report %s (plan %q, shard %d): %+v", kind, plan, shard, d.Findings)
	return doctor.Finding{}
}

// newPlan returns the plan file in dir that is not among known.
func newPlan(t *testing.T, dir string, known ...string) *plans.Plan {
	t.Helper()
	for _, f := range planFiles(t, dir) {
		if id := planID(f); !slices.Contains(known, id) {
			p, err := plans.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatalf("no new plan in %s", dir)
	return nil
}

// Issue 36: every half-finished state a fault leaves is planted by the
// fault itself (a kill -9 at a step, plans-table writes that fail, a frozen
// process); doctor names each with the command that ends it, --fix ends
// the safe ones, and once the rest are ended doctor finds nothing.
func TestDoctorFindsAndEndsHalfFinishedStates(t *testing.T) {
	testenv.FlavorNeutral(t)
	alongside(t)
	c := newCluster(t, "e2e_doctor", []int{1, 1, 2}, []int{300, 300, 300})
	s3 := c.env.Addr(3).String()
	src1 := c.shards[0].Schema

	// Bad input is refused with exit 2 and what to give.
	for _, bad := range []struct {
		args []string
		hint string
	}{
		{[]string{"doctor", "--stale-lock", "1s"}, "allowed 5s"},
		{[]string{"doctor", "shard1"}, "usage"},
	} {
		if r := c.run(nil, bad.args...); r.code != 2 || !strings.Contains(r.stderr, bad.hint) {
			t.Fatalf("%v: exit %d\n%s", bad.args, r.code, r.stderr)
		}
	}

	// 1. The plans table refuses every write, and the move of shard 1 is
	// killed inside its fence: the plan exists only as this host's file,
	// the shard is fenced and offline, its lock row names a dead process.
	r := c.run([]string{"SHARDCTL_FAULT=planstore:put,during:fence:half"}, "move", "--shard", "1", "--to", s3, "--yes")
	if !r.killed {
		t.Fatalf("not killed inside the fence: exit %d\n%s", r.code, r.stderr)
	}
	p1 := newPlan(t, c.planDir)
	c.locksFreed(p1.Locks)
	rep := c.doctor(1)
	if f := rep.find(t, doctor.KindPlanStopped, p1.ID, 1); f.Command != "shardctl plan resume "+p1.ID || !strings.Contains(f.Alternative, "shardctl plan abort "+p1.ID) ||
		!strings.Contains(f.What, "fenced") || !strings.Contains(f.What, "offline") || f.Fixable {
		t.Fatalf("stopped plan: %+v", f)
	}
	if f := rep.find(t, doctor.KindPlanCopies, p1.ID, 0); !f.Fixable || f.Command != doctor.FixCommand {
		t.Fatalf("plan copies: %+v", f)
	}
	rep.find(t, doctor.KindLockRow, "", 0)
	for _, f := range rep.Findings {
		if f.Kind == doctor.KindFence || f.Kind == doctor.KindOffline {
			t.Fatalf("the stopped plan's own fence or mapping reported apart from it: %+v", f)
		}
	}
	text := c.run(nil, "doctor")
	if text.code != 1 || !strings.Contains(text.stdout, "plan-stopped: plan "+p1.ID) || !strings.Contains(text.stdout, "end it: shardctl plan resume "+p1.ID) ||
		!strings.Contains(text.stdout, "or: shardctl plan abort "+p1.ID) || !strings.Contains(text.stdout, "plan-copies:") {
		t.Fatalf("doctor (text): exit %d\n%s\n%s", text.code, text.stdout, text.stderr)
	}

	// Another operator host has no copy of the plan: to it the fence and the
	// offline mapping belong to nobody, and --fix lifts and restores them.
	other := []string{"--plan-dir", filepath.Join(c.dir, "other-host")}
	rep = c.doctor(1, other...)
	if f := rep.find(t, doctor.KindFence, "", 1); !f.Fixable || f.Schema != src1 {
		t.Fatalf("fence: %+v", f)
	}
	rep.find(t, doctor.KindOffline, "", 1)
	var fenced string // a table the half-installed fence covers
	if err := c.db(1).QueryRow("SELECT t.EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS t JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = t.TRIGGER_SCHEMA AND c.TABLE_NAME = t.EVENT_OBJECT_TABLE AND c.COLUMN_NAME = 'emp_no' "+
		"WHERE t.TRIGGER_SCHEMA = ? AND t.TRIGGER_NAME LIKE 'shardctl\\_fence\\_%' LIMIT 1", src1).Scan(&fenced); err != nil {
		t.Fatal(err)
	}
	upd := "UPDATE " + dbutil.Table(src1, fenced) + " SET emp_no = emp_no LIMIT 1"
	if _, err := c.db(1).Exec(upd); dbutil.ErrNumber(err) != 1290 {
		t.Fatalf("shard 1 is not fenced before --fix: %v", err)
	}
	rep = c.doctor(0, append(other, "--fix")...)
	if !rep.Healthy || rep.Fixed != rep.Found || rep.Found < 2 {
		t.Fatalf("--fix on the other host: %+v", rep)
	}
	// The killed run's lock row: a note (the lock is free), deleted by --fix.
	if f := rep.find(t, doctor.KindLockRow, "", 0); !f.Info || !f.Fixed {
		t.Fatalf("the free lock's row: %+v", f)
	}
	if _, err := c.db(1).Exec(upd); err != nil {
		t.Fatalf("shard 1 still fenced after --fix: %v", err)
	}
	m, _ := c.store.Load(ctx)
	if st := m.ShardMappings(1)[0].Status; st != "online" {
		t.Fatalf("shard 1 is %s after --fix", st)
	}
	// This host still sees the stopped plan; --fix stores its file's copy.
	rep = c.doctor(1, "--fix")
	if f := rep.find(t, doctor.KindPlanCopies, p1.ID, 0); !f.Fixed {
		t.Fatalf("plan copies not fixed: %+v", f)
	}
	if f := rep.find(t, doctor.KindPlanStopped, p1.ID, 0); f.Fixed {
		t.Fatalf("--fix ended a stopped plan: %+v", f)
	}
	if _, err := planstore.New(c.store.DB, c.name).Get(ctx, p1.ID); err != nil {
		t.Fatalf("the plan's row after --fix: %v", err)
	}
	c.mustRun("plan", "abort", p1.ID)

	// 2. The move of shard 3 is killed inside its reverse window, which
	// then ends with no process to end it.
	r = c.run([]string{"SHARDCTL_FAULT=during:window"}, "move", "--shard", "3", "--to", s3, "--yes", "--reverse-window", "20s")
	if !r.killed {
		t.Fatalf("not killed in the window: exit %d\n%s", r.code, r.stderr)
	}
	p3 := newPlan(t, c.planDir, p1.ID)
	if p3.Window == nil || p3.Window.Until.IsZero() {
		t.Fatalf("no window: %+v", p3.Window)
	}
	time.Sleep(time.Until(p3.Window.Until) + time.Second)
	rep = c.doctor(1)
	if f := rep.find(t, doctor.KindWindowExpired, p3.ID, 3); f.Command != "shardctl plan complete "+p3.ID {
		t.Fatalf("window: %+v", f)
	}

	// 3. The move of shard 2 freezes (SIGSTOP) holding the shard's lock:
	// once its session sits idle, doctor calls the holder dead and --fix
	// ends the session; the thawed process finds its lock gone and stops.
	postpone := filepath.Join(c.dir, "postpone")
	if err := os.WriteFile(postpone, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// --retry-for 0: the thawed move stops on its lost lock rather than take it again.
	mv := c.startBG(nil, "move", "--shard", "2", "--to", s3, "--yes", "--postpone-cutover-file", postpone, "--retry-for", "0")
	// Frozen once it waits at the cutover (its lock held, its copy verified).
	var p2 *plans.Plan
	for deadline := time.Now().Add(2 * time.Minute); p2 == nil || !p2.Done(plans.StepVerify); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the move never reached its cutover\n%s", mv.err.String())
		}
		for _, f := range planFiles(t, c.planDir) {
			if id := planID(f); id != p1.ID && id != p3.ID {
				p2, _ = plans.Load(f)
			}
		}
	}
	if err := mv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		rep = c.doctor(1, "--stale-lock", "5s")
		if slices.ContainsFunc(rep.Findings, func(f doctor.Finding) bool { return f.Kind == doctor.KindLockDead }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the frozen holder was never called dead: %+v", rep.Findings)
		}
	}
	rep = c.doctor(1, "--fix", "--stale-lock", "5s")
	if f := rep.find(t, doctor.KindLockDead, "", 0); !f.Fixed {
		t.Fatalf("dead lock not fixed: %+v", f)
	}
	if err := mv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := mv.wait(t, 2*time.Minute); code != 3 {
		t.Fatalf("the thawed move: exit %d (want 3)\n%s", code, mv.err.String())
	}
	rep = c.doctor(1)
	rep.find(t, doctor.KindPlanStopped, p2.ID, 2)
	rep.find(t, doctor.KindWindowExpired, p3.ID, 3)

	// Each remaining command ends its state; doctor then finds nothing.
	if err := os.Remove(postpone); err != nil {
		t.Fatal(err)
	}
	c.mustRun("plan", "resume", p2.ID)
	c.mustRun("plan", "complete", p3.ID)
	// A split that ran to the end leaves nothing doctor would report either.
	c.mustRun("split", "--shard", "1", "--at", fmt.Sprint(c.shards[0].Lower+150), "--to", s3, "--yes")
	rep = c.doctor(0)
	if !rep.Healthy || rep.Found != 0 {
		t.Fatalf("after every command: %+v", rep)
	}
	if text := c.run(nil, "doctor"); text.code != 0 || !strings.Contains(text.stdout, "nothing half-finished") {
		t.Fatalf("doctor (text) at the end: exit %d\n%s", text.code, text.stdout)
	}
	c.ownership()
}
