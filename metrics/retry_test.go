package metrics

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardctl/shardctl/plans"
)

// A run waiting to resume itself shows the wait; the next step's start clears it.
func TestRetryWait(t *testing.T) {
	file := filepath.Join(t.TempDir(), "shardctl.prom")
	s, err := New(file, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := plans.New("move", "move shard 4")
	p.Source.ShardID = 4
	o := s.Plan(p)
	lbl := map[string]string{"plan": p.ID, "operation": "move", "shard": "4"}
	read := func() (float64, string) {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fams := parse(t, f)
		v, _ := value(fams, "shardctl_retry_wait_seconds", lbl)
		for st, want := range map[string]string{plans.StateStopped: "stopped", plans.StateRunning: "running"} {
			if x, _ := value(fams, "shardctl_plan_state", map[string]string{"plan": p.ID, "state": st}); x == 1 {
				return v, want
			}
		}
		return v, ""
	}
	o.Step(plans.StepCopy, "started")
	o.Step(plans.StepCopy, "failed")
	o.Retrying(4*time.Second, time.Minute, errors.New("invalid connection"))
	if v, st := read(); v != 4 || st != "stopped" {
		t.Errorf("waiting: retry wait %v, state %q; want 4, stopped", v, st)
	}
	o.Step(plans.StepCopy, "started")
	if v, st := read(); v != 0 || st != "running" {
		t.Errorf("resumed: retry wait %v, state %q; want 0, running", v, st)
	}
}
