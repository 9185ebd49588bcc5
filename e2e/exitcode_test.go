package e2e

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/plans"
)

// A deterministic failure (a missing privilege) exits 1 with a message that
// names the step and the table and says what to do, and a resume repeats it
// until the cause is fixed; a transient one (SIGTERM) exits 3. Both plans
// then resume to the end.
func TestExitCodes(t *testing.T) {
	c := newCluster(t, "e2e_exit", []int{2, 1}, []int{200, 100})
	src := c.db(2)

	// Deterministic: cleanup cannot delete on the source.
	r := c.run([]string{"SHARDCTL_FAULT=after:cutover"}, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--prune-chunk-rows", "100")
	if !r.killed {
		t.Fatalf("fault did not kill the move: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSuffix(planFiles(t, c.planDir)[0][len(c.planDir)+1:], ".json")
	if _, err := src.Exec("REVOKE DELETE ON *.* FROM 'shardctl'@'%'"); err != nil {
		t.Fatal(err)
	}
	granted := false
	grant := func() {
		if !granted {
			granted = true
			if _, err := src.Exec("GRANT DELETE ON *.* TO 'shardctl'@'%'"); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(grant)
	for i := 0; i < 2; i++ {
		r = c.run(nil, "plan", "resume", id)
		if r.code != 1 || !strings.Contains(r.stderr, "step cleanup") || !strings.Contains(r.stderr, "GRANT") || !strings.Contains(r.stderr, "plan resume "+id) {
			t.Fatalf("resume %d without DELETE privilege: exit %d, want 1 with step, fix and resume command\n%s", i+1, r.code, r.stderr)
		}
	}
	t.Logf("deterministic failure: %s", lastLine(r.stderr))
	grant()
	c.mustRun("plan", "resume", id)

	// Transient: SIGTERM while the copy runs (slowed by --max-rate).
	cmd := c.command(nil, "move", "--shard", "2", "--to", c.env.Addr(3).String(), "--yes", "--chunk-rows", "50", "--max-rate", "200")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	for deadline := time.Now().Add(60 * time.Second); !copying(t, c); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second move never reached its copy step\n%s", errb.String())
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("shardctl did not stop within 60 s of SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("SIGTERM during the copy: exit %d, want 3\n%s", code, errb.String())
	}
	t.Logf("transient failure: %s", lastLine(errb.String()))
	for _, f := range planFiles(t, c.planDir) {
		if p, err := plans.Load(f); err == nil && p.State == plans.StateStopped {
			c.mustRun("plan", "resume", p.ID)
		}
	}
	c.ownership()
}

// copying reports whether some plan in the plan directory is in its copy step.
func copying(t *testing.T, c *cluster) bool {
	for _, f := range planFiles(t, c.planDir) {
		if p, err := plans.Load(f); err == nil && p.Operation == "move" && p.Source.ShardID == 2 && p.Step(plans.StepCopy).State == plans.Running {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
