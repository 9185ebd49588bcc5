package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
)

// fakeRetrier is a retrier on a fake clock: run returns the next of errs
// (nil after the last), each run adds gain to the progress, and waits are
// recorded instead of slept.
type fakeRetrier struct {
	clock    time.Time
	errs     []error
	runs     int
	gain     int64
	progress int64
	waits    []time.Duration
	notes    []string
}

func (f *fakeRetrier) retrier(budget time.Duration) retrier {
	return retrier{
		budget: budget,
		run: func(context.Context) error {
			f.runs++
			f.progress += f.gain
			f.clock = f.clock.Add(100 * time.Millisecond) // a run takes time too
			if f.runs > len(f.errs) {
				return nil
			}
			return f.errs[f.runs-1]
		},
		retry:    func(err error) bool { return retryable(err, &plans.Plan{State: plans.StateStopped}) },
		reload:   func() error { return nil },
		progress: func() int64 { return f.progress },
		notify: func(wait, left time.Duration, err error) {
			f.notes = append(f.notes, fmt.Sprintf("%s/%s", wait, left.Round(time.Second)))
		},
		now: func() time.Time { return f.clock },
		sleep: func(_ context.Context, d time.Duration) error {
			f.waits = append(f.waits, d)
			f.clock = f.clock.Add(d)
			return nil
		},
	}
}

// Inside the blackout (a cutover attempt open) every wait is the first: the
// shard waits behind its fence for as long as the back-off lasts.
func TestRetrierDoesNotBackOffInsideTheBlackout(t *testing.T) {
	f := &fakeRetrier{errs: repeat(transientErr(), 4)}
	rt := f.retrier(2 * time.Minute)
	rt.urgent = func() bool { return f.runs <= 2 } // the first two stops inside the blackout
	if err := rt.do(context.Background()); err != nil {
		t.Fatalf("err %v", err)
	}
	if !slices.Equal(f.waits, []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second}) {
		t.Fatalf("waits %v", f.waits)
	}
	open := &plans.Plan{Steps: []plans.StepRecord{{Name: plans.StepFence}, {Name: plans.StepCutover}},
		Attempts: []plans.Attempt{{Result: "backed off: budget"}, {Result: attemptFencing}}}
	if !inBlackout(open) {
		t.Error("a plan stopped with an attempt fencing is not in its blackout")
	}
	open.Attempts[1].Result = "backed off: lost the lock"
	if inBlackout(open) {
		t.Error("a plan whose last attempt backed off is in its blackout")
	}
}

func transientErr() error {
	return &StepError{Operation: "move", Shard: "shard 1 (s1)", Step: plans.StepCopy, Transient: true, Err: mysql.ErrInvalidConn}
}

// repeat is n copies of v.
func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestRetrierResumesUntilARunSucceeds(t *testing.T) {
	f := &fakeRetrier{errs: repeat(transientErr(), 3)}
	if err := f.retrier(2 * time.Minute).do(context.Background()); err != nil {
		t.Fatalf("err %v", err)
	}
	if f.runs != 4 || !slices.Equal(f.waits, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}) {
		t.Fatalf("runs %d waits %v", f.runs, f.waits)
	}
	if len(f.notes) != 3 || f.notes[0] != "1s/2m0s" {
		t.Fatalf("notes %v", f.notes)
	}
}

func TestRetrierStopsWhenTheBudgetIsSpent(t *testing.T) {
	f := &fakeRetrier{errs: repeat(transientErr(), 100)}
	err := f.retrier(20 * time.Second).do(context.Background())
	var se *StepError
	if !errors.As(err, &se) || !se.Transient || !errors.Is(err, mysql.ErrInvalidConn) {
		t.Fatalf("err %v: want the run's transient StepError", err)
	}
	// Doubling from 1s, capped at 15s and at what is left of the budget.
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	if len(f.waits) < len(want) || !slices.Equal(f.waits[:4], want) {
		t.Fatalf("waits %v", f.waits)
	}
	var total time.Duration
	for _, w := range f.waits {
		total += w
		if w > RetryMaxWait {
			t.Fatalf("wait %s above the cap: %v", w, f.waits)
		}
	}
	if total > 20*time.Second {
		t.Fatalf("waited %s, more than the budget: %v", total, f.waits)
	}
	if f.runs != len(f.waits)+1 || f.runs > 10 {
		t.Fatalf("runs %d waits %v", f.runs, f.waits)
	}
}

func TestRetrierBudgetStartsAfreshAfterProgress(t *testing.T) {
	// Each retried run gets on before it fails again: every failure is a new
	// fault with the whole budget, and the back-off starts at 1s again.
	f := &fakeRetrier{errs: repeat(transientErr(), 30), gain: 1}
	if err := f.retrier(3 * time.Second).do(context.Background()); err != nil {
		t.Fatalf("err %v", err)
	}
	if f.runs != 31 || len(f.waits) != 30 || slices.Max(f.waits) != time.Second {
		t.Fatalf("runs %d waits %v", f.runs, f.waits)
	}
}

func TestRetrierLeavesOtherFailuresAlone(t *testing.T) {
	deterministic := &StepError{Operation: "move", Step: plans.StepCopy, Err: &mysql.MySQLError{Number: 1146, Message: "no such table"}}
	for name, err := range map[string]error{
		"deterministic":  deterministic,
		"refused":        fmt.Errorf("%w: a check failed", ErrRefused),
		"lock held":      fmt.Errorf("shard 1: %w", lock.ErrBusy),
		"blackout":       &StepError{Step: plans.StepFence, Transient: true, Err: ErrBudget},
		"verify differs": fmt.Errorf("%w: 3 chunks", ErrMismatch),
	} {
		f := &fakeRetrier{errs: []error{err}}
		if got := f.retrier(time.Minute).do(context.Background()); got != err || f.runs != 1 {
			t.Errorf("%s: got %v after %d runs, want it back after one", name, got, f.runs)
		}
	}
	f := &fakeRetrier{errs: []error{transientErr()}}
	if got := f.retrier(0).do(context.Background()); got == nil || f.runs != 1 {
		t.Errorf("--retry-for 0: got %v after %d runs, want the failure after one", got, f.runs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f = &fakeRetrier{errs: []error{transientErr()}}
	if got := f.retrier(time.Minute).do(ctx); got == nil || f.runs != 1 {
		t.Errorf("interrupted: got %v after %d runs, want the failure after one", got, f.runs)
	}
}

func TestResumableNeedsAStoppedPlan(t *testing.T) {
	for _, st := range []string{plans.StateNew, plans.StateRunning, plans.StateDone} {
		if Resumable(transientErr(), &plans.Plan{State: st}) {
			t.Errorf("state %s: resumable", st)
		}
	}
	if !Resumable(transientErr(), &plans.Plan{State: plans.StateStopped}) || Resumable(transientErr(), nil) {
		t.Error("stopped plan: want resumable; no plan: not")
	}
}

func TestOnFailureHookRunsOnceWhenTheRetriesEnd(t *testing.T) {
	var calls []string
	env := Env{Hook: func(_ context.Context, point string, _ *plans.Plan, step string) error {
		calls = append(calls, point+"@"+step)
		return nil
	}}
	p := &plans.Plan{}
	held, gaveUp := holdOnFailure(env, p)
	_ = held.Hook(context.Background(), HookOnFailure, p, plans.StepCopy)
	_ = held.Hook(context.Background(), HookPlanStart, p, plans.StepCopy)
	_ = held.Hook(context.Background(), HookOnFailure, p, plans.StepFence)
	if !slices.Equal(calls, []string{HookPlanStart + "@" + plans.StepCopy}) {
		t.Fatalf("while retrying: %v, want only the plan-start hook", calls)
	}
	gaveUp(transientErr())
	if !slices.Equal(calls, []string{HookPlanStart + "@" + plans.StepCopy, HookOnFailure + "@" + plans.StepFence}) {
		t.Fatalf("after giving up: %v, want the last failure's on-failure hook", calls)
	}
	calls = nil
	held, gaveUp = holdOnFailure(env, p)
	_ = held.Hook(context.Background(), HookOnFailure, p, plans.StepCopy)
	gaveUp(nil)
	if len(calls) != 0 {
		t.Fatalf("a healed run ran %v", calls)
	}
}

// A run that stops with the fence held and the map not switched says so and
// names the resume, whatever its last failure was (taking the lock, say);
// a run past its cutover, or one whose message already says it, is left as is.
func TestStillFencedSaysSo(t *testing.T) {
	p := &plans.Plan{ID: "move-1", Steps: []plans.StepRecord{{Name: plans.StepFence, State: plans.Done}, {Name: plans.StepCutover}}}
	p.Source.ShardID = 1
	lockErr := errors.New("lock: invalid connection")
	if got := stillFenced(lockErr, p); got != lockErr {
		t.Errorf("no fence held: %v", got)
	}
	p.Checkpoints.Final = plans.Position{File: "binlog.000002", Pos: 4}
	got := stillFenced(lockErr, p)
	if !errors.Is(got, lockErr) || !strings.Contains(got.Error(), "fenced") || !strings.Contains(got.Error(), "'shardctl plan resume move-1'") {
		t.Errorf("fence held: %v", got)
	}
	if again := stillFenced(got, p); again != got {
		t.Errorf("said twice: %v", again)
	}
	// An attempt whose undo failed (the source unreachable) stays open.
	p.Checkpoints.Final = plans.Position{}
	p.Attempts = []plans.Attempt{{Result: attemptFencing + " (undoing it failed: invalid connection)"}}
	if got := stillFenced(lockErr, p); !strings.Contains(got.Error(), "fenced") {
		t.Errorf("an attempt left open: %v", got)
	}
	p.Steps[1].State = plans.Done
	if got := stillFenced(lockErr, p); got != lockErr {
		t.Errorf("cut over: %v", got)
	}
}

// A back-off wait that began with a server not answering ends once they
// all answer (a restarted server is met within readyPoll, not at the next
// back-off step); one that began with them answering is waited out (the
// failure was something else, and the back-off keeps it from a hot loop);
// a server that never answers again leaves the wait as long as it was.
func TestRetrierWaitEndsWhenTheServersAnswerAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []bool // what each look at the servers sees, then true
		want    []time.Duration
	}{
		{"back in the wait", []bool{false, false, false}, []time.Duration{readyPoll, readyPoll, readyPoll}},
		{"never gone", nil, []time.Duration{8 * time.Second}},
		{"gone for good", repeat(false, 100), repeat(readyPoll, 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRetrier{errs: repeat(transientErr(), 4)}
			rt := f.retrier(2 * time.Minute)
			looks := 0 // in the fourth wait
			rt.answer = func(context.Context) bool {
				if f.runs < 4 { // the first three waits: no server gone
					return true
				}
				looks++
				return looks > len(tc.answers) || tc.answers[looks-1]
			}
			if err := rt.do(context.Background()); err != nil {
				t.Fatalf("err %v", err)
			}
			if !slices.Equal(f.waits[:3], []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}) {
				t.Fatalf("the waits with every server answering are not the back-off: %v", f.waits)
			}
			if got := f.waits[3:]; !slices.Equal(got, tc.want) {
				t.Fatalf("the fourth wait (8s) slept %v, want %v", got, tc.want)
			}
		})
	}
}
