package pipeline

import (
	"context"
	"time"

	"github.com/shardctl/shardctl/plans"
)

// Hook points (docs/hooks.md). Hooks never run while the fence holds.
const (
	HookPlanStart    = "plan-start"    // each run of a plan, once its lock is held; failing refuses the run
	HookBeforeFence  = "before-fence"  // before each cutover attempt; failing postpones the cutover
	HookAfterCutover = "after-cutover" // the shard map points at the target
	HookAfterCleanup = "after-cleanup" // the source copy is cleaned up
	HookOnFailure    = "on-failure"    // a step failed; the plan is stopped
)

// HookPoints lists every hook point.
var HookPoints = []string{HookPlanStart, HookBeforeFence, HookAfterCutover, HookAfterCleanup, HookOnFailure}

func (r *runner) hook(ctx context.Context, point, step string) error {
	if r.env.Hook == nil {
		return nil
	}
	return r.env.Hook(ctx, point, r.p, step)
}

// afterStep runs the hooks that follow a finished step; their failure is the
// hook's business (logged by the hook runner), not the plan's. The cleanup
// is the last step: Run calls its hook once the plan is saved done.
func (r *runner) afterStep(ctx context.Context, step string) {
	if step == plans.StepCutover {
		_ = r.hook(ctx, HookAfterCutover, step)
	}
}

// LagObserver is an Observer that also wants to know how far the target
// trails the source: the time the last catch-up to a fresh source position took.
type LagObserver interface {
	Lag(d time.Duration)
}

func (r *runner) lag(d time.Duration) {
	if l, ok := r.env.Observer.(LagObserver); ok {
		l.Lag(d)
	}
}

// Tee sends everything to each observer.
func Tee(obs ...Observer) Observer { return tee(obs) }

type tee []Observer

func (t tee) Step(name, state string) {
	for _, o := range t {
		o.Step(name, state)
	}
}

func (t tee) Progress(step string, done, total int64, detail string) {
	for _, o := range t {
		o.Progress(step, done, total, detail)
	}
}

func (t tee) Retrying(wait, left time.Duration, err error) {
	for _, o := range t {
		if r, ok := o.(RetryObserver); ok {
			r.Retrying(wait, left, err)
		}
	}
}

func (t tee) Lag(d time.Duration) {
	for _, o := range t {
		if l, ok := o.(LagObserver); ok {
			l.Lag(d)
		}
	}
}

func (t tee) Throttled(step, reason string) {
	for _, o := range t {
		if l, ok := o.(ThrottleObserver); ok {
			l.Throttled(step, reason)
		}
	}
}

func (t tee) ReplicaLag(replica string, lag time.Duration, ok bool) {
	for _, o := range t {
		if l, is := o.(ThrottleObserver); is {
			l.ReplicaLag(replica, lag, ok)
		}
	}
}
