package pipeline

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/throttle"
)

// Throttler paces a run's chunked work (package throttle).
type Throttler = throttle.Throttler

// ThrottleObserver is an Observer that is also told when the running step
// starts or stops waiting on the throttler (reason "" when it goes on), and
// each replica lag sample (ok false: none could be read). Optional.
type ThrottleObserver interface {
	Throttled(step, reason string)
	ReplicaLag(replica string, lag time.Duration, ok bool)
}

func throttleConfig(opts plans.Options) throttle.Config {
	cfg := throttle.Config{
		MaxRate:           opts.MaxRate,
		MaxThreadsRunning: opts.MaxThreadsRunning,
		MaxLag:            opts.MaxLagMS.D(),
		ControlFile:       opts.ControlFile,
	}
	for _, r := range opts.Replicas {
		if r == plans.ReplicasAuto {
			cfg.Discover = true
		} else {
			cfg.Replicas = append(cfg.Replicas, r)
		}
	}
	return cfg
}

// NewThrottler paces work on src by the plan options' limits. Close it when done.
func NewThrottler(ctx context.Context, src *sql.DB, opts plans.Options, creds dbutil.Creds) (*Throttler, error) {
	return throttle.New(ctx, src, throttleConfig(opts), creds)
}

// openThrottler is the run's throttler: what it waits on goes to the log,
// the plan's running step (plan watch) and the observer (step view, metrics).
func (r *runner) openThrottler(ctx context.Context) (*Throttler, error) {
	cfg := throttleConfig(r.p.Options)
	cfg.Target = r.dst
	cfg.OnChange = r.throttled
	if o, ok := r.env.Observer.(ThrottleObserver); ok {
		cfg.OnLag = o.ReplicaLag
	}
	return throttle.New(ctx, r.src, cfg, r.env.Creds)
}

// throttled records why the work waits. The reason's figures change every
// check (a lag, an age); the log, the forced save and the observer hear of
// a change of kind only: waiting starts or ends, or waits for another cause.
func (r *runner) throttled(reason string) {
	r.mu.Lock()
	step := ""
	for i := range r.p.Steps {
		if s := &r.p.Steps[i]; s.State == plans.Running {
			step, s.Throttled = s.Name, reason
		}
	}
	k := reasonKind(reason)
	changed := k != r.throttleKind
	r.throttleKind = k
	r.mu.Unlock()
	if !changed {
		_ = r.save(false)
		return
	}
	if reason != "" {
		r.env.Log.Warn("work waits", "plan", r.p.ID, "step", step, "reason", reason)
	} else {
		r.env.Log.Info("work goes on", "plan", r.p.ID, "step", step)
	}
	if o, ok := r.env.Observer.(ThrottleObserver); ok {
		o.Throttled(step, reason)
	}
	_ = r.save(true)
}

// reasonKind is a throttle reason without its figures.
func reasonKind(reason string) string {
	return strings.Map(func(c rune) rune {
		if c >= '0' && c <= '9' || c == '.' {
			return -1
		}
		return c
	}, reason)
}
