package cmd

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"

	"github.com/shardctl/shardctl/plans"
)

// fakeLoader returns the plans in order, then the last one again.
type fakeLoader struct{ seq []*plans.Plan }

func (f *fakeLoader) LoadPlan(context.Context, string) (*plans.Plan, error) {
	p := f.seq[0]
	if len(f.seq) > 1 {
		f.seq = f.seq[1:]
	}
	return p, nil
}

func watchFixture(states ...string) []*plans.Plan {
	var out []*plans.Plan
	for i, st := range states {
		p := plans.New("move", "move shard 1")
		p.State = st
		for j := range p.Steps {
			if j <= i {
				p.Steps[j].State = plans.Done
			}
		}
		if st == plans.StateStopped {
			p.Steps[i].State, p.Steps[i].Error = plans.Failed, "boom"
		}
		out = append(out, p)
	}
	return out
}

// Off a terminal, watch prints one line per step change and ends with the plan.
func TestWatchPlanEnds(t *testing.T) {
	var out bytes.Buffer
	a := &app{v: viper.New(), out: &out, errOut: &out}
	l := &fakeLoader{seq: watchFixture(plans.StateRunning, plans.StateRunning, plans.StateDone)}
	if err := a.watchPlan(context.Background(), l, "x", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"preflight done", "create done", "copy done", "move shard 1: done"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if strings.Count(got, "preflight done") != 1 {
		t.Errorf("a step change printed twice:\n%s", got)
	}

	out.Reset()
	l = &fakeLoader{seq: watchFixture(plans.StateRunning, plans.StateStopped)}
	err := a.watchPlan(context.Background(), l, "x", 10*time.Millisecond)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != ExitResumable || !strings.Contains(out.String(), "create failed: boom") {
		t.Errorf("stopped plan: %v\n%s", err, out.String())
	}

	// Ctrl-C (a cancelled context) stops watching without an error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l = &fakeLoader{seq: watchFixture(plans.StateRunning)}
	if err := a.watchPlan(ctx, l, "x", 10*time.Millisecond); err != nil {
		t.Errorf("cancelled watch: %v", err)
	}
}
