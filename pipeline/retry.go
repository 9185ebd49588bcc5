package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// The back-off between two runs of RunRetrying: the first wait, doubling up
// to the last.
const (
	RetryFirstWait = time.Second
	RetryMaxWait   = 15 * time.Second
)

// readyPoll is how often a back-off wait that began with one of the plan's
// servers not answering looks at them again: once they all answer the wait
// ends, so a server restarted in 3 s is met then, not at a back-off step
// that may be 15 s away.
const readyPoll = 250 * time.Millisecond

// RetryObserver is an Observer that is told when a stopped run is resumed
// in place, and after how long. Optional, so other observers need not change.
type RetryObserver interface {
	Retrying(wait, left time.Duration, err error)
}

// Resumable reports whether a run that returned err, leaving p, stopped for
// a reason a resume cures as things are (exit 3): the plan is stopped, and
// the failure is none of those an operator must look at first (a refusal, a
// lock another operation holds, a deterministic step failure, differences
// found, a purged binlog, a plan already cut over or live).
func Resumable(err error, p *plans.Plan) bool {
	var se *StepError
	switch {
	case err == nil, p == nil, p.State != plans.StateStopped:
		return false
	case errors.Is(err, ErrRefused), errors.Is(err, ErrPurged), errors.Is(err, ErrMismatch), errors.Is(err, ErrCutOver), errors.Is(err, ErrLive),
		errors.Is(err, lock.ErrBusy), errors.Is(err, plans.ErrDamaged), errors.Is(err, shardmap.ErrBadInput), errors.Is(err, shardmap.ErrNotFound):
		return false
	case errors.As(err, &se) && !se.Transient:
		return false
	}
	return true
}

// RunRetrying runs p and, while a run stops for a reason a resume cures
// (Resumable), resumes it in place the way 'plan resume' does: the plan
// re-read from its file, connections re-opened, the lock re-taken (held by
// another operation meanwhile: it stops with lock.ErrBusy), the checks run
// again, and the steps continued from their last checkpoint. It waits
// between runs (RetryFirstWait doubling to RetryMaxWait; a wait that began
// with a server down ends once they all answer again) for at most the
// plan's RetryForMS, counted from the failure: a run that made progress
// before it failed again starts a fresh budget, so two restarts hours apart
// each get one. Not retried: a run the operator interrupted, and a cutover
// that ran out of its own attempts (ErrBudget).
//
// The on-failure hook runs once, when the run gives up, not at each
// failure it heals (each resumption runs the plan-start hook, as 'plan
// resume' does).
func RunRetrying(ctx context.Context, env Env, p *plans.Plan) error {
	if p.Options.RetryForMS <= 0 {
		return stillFenced(Run(ctx, env, p), p)
	}
	env, gaveUp := holdOnFailure(env, p)
	rt := retrier{
		budget: p.Options.RetryForMS.D(),
		run:    func(ctx context.Context) error { return Run(ctx, env, p) },
		retry:  func(err error) bool { return retryable(err, p) },
		reload: func() error {
			q, err := plans.Load(env.PlanPath)
			if err != nil {
				return err
			}
			*p = *q
			return nil
		},
		progress: func() int64 { return progressOf(p) },
		urgent:   func() bool { return inBlackout(p) },
		notify: func(wait, left time.Duration, err error) {
			if env.Log != nil {
				env.Log.Warn(fmt.Sprintf("retrying in %s after: %v (retry budget %s left)", wait, err, left.Round(time.Second)),
					"plan", p.ID, "retry_in", wait.String(), "budget_left", left.Round(time.Second).String())
			}
			if o, ok := env.Observer.(RetryObserver); ok {
				o.Retrying(wait, left, err)
			}
		},
		now:    time.Now,
		sleep:  sleep,
		answer: func(ctx context.Context) bool { return serversAnswer(ctx, env.Store, p) },
	}
	err := stillFenced(rt.do(ctx), p)
	gaveUp(err)
	return err
}

// stillFenced adds to a run's failure, when it stops with the shard's fence
// held and the map not switched, that the shard stays fenced and offline and
// the command that ends it: the failure that ends the run may be a later
// attempt's (taking the lock, a connection) that knows nothing of the fence
// an earlier attempt left.
func stillFenced(err error, p *plans.Plan) error {
	if Transient(err) {
		err = dbutil.Explain(err) // a connection the watchdog closed: which server, what to check
	}
	if err == nil || p == nil || p.CutOver() || (p.Checkpoints.Final.IsZero() && !inBlackout(p)) {
		return err
	}
	if msg := err.Error(); strings.Contains(msg, "fenced") && strings.Contains(msg, "plan resume "+p.ID) {
		return err // said already
	}
	return fmt.Errorf("%w; shard %d may stay fenced at its source %s/%s and its mappings offline (writes to it wait or fail): 'shardctl plan resume %s' ends it once the servers answer (or 'shardctl plan abort %s' lifts the fence)",
		err, p.Source.ShardID, p.Source.Addr(), p.Source.Schema, p.ID, p.ID)
}

// holdOnFailure holds back env's on-failure hook: gaveUp runs it for the
// last failure a run reported when the retries end with err.
func holdOnFailure(env Env, p *plans.Plan) (Env, func(err error)) {
	hook := env.Hook
	if hook == nil {
		return env, func(error) {}
	}
	var step string
	held := false
	env.Hook = func(ctx context.Context, point string, q *plans.Plan, s string) error {
		if point == HookOnFailure {
			step, held = s, true
			return nil
		}
		return hook(ctx, point, q, s)
	}
	return env, func(err error) {
		if err != nil && held {
			_ = hook(context.Background(), HookOnFailure, p, step)
		}
	}
}

// retryable reports whether RunRetrying resumes a run that stopped with err.
func retryable(err error, p *plans.Plan) bool {
	return Resumable(err, p) && !errors.Is(err, ErrBudget)
}

// inBlackout reports whether p stopped with a cutover attempt open: its
// fence may still hold the shard's writes and its mappings be offline, so
// every second of back-off is a second of blackout (the fault matrix's
// cutover/shardmap-crash cell).
func inBlackout(p *plans.Plan) bool {
	n := len(p.Attempts)
	return n > 0 && strings.HasPrefix(p.Attempts[n-1].Result, attemptFencing) && !p.CutOver()
}

// progressOf is a number that grows as p's run gets on: steps done, rows
// and changes carried.
func progressOf(p *plans.Plan) int64 {
	n := p.Result.RowsCopied + p.Result.EventsApplied + p.Result.RowsVerified + p.Result.RowsDeleted
	for _, s := range p.Steps {
		if p.Done(s.Name) {
			n += 1 << 40
		}
	}
	return n
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retrier is RunRetrying's loop, with what it runs, reads and waits on
// given, so its back-off and budget are tested without a server.
type retrier struct {
	budget   time.Duration
	run      func(context.Context) error
	retry    func(error) bool
	reload   func() error
	progress func() int64
	urgent   func() bool // retry at the first wait, not backing off further
	notify   func(wait, left time.Duration, err error)
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
	answer   func(context.Context) bool // the plan's servers answer; nil: waits are never cut short
}

// wait is one back-off wait of d. When a server did not answer at its start
// it ends as soon as they all do (looked at every readyPoll); when they all
// answered, the failure was something else and the wait is d.
func (rt retrier) wait(ctx context.Context, d time.Duration) error {
	if rt.answer == nil || rt.answer(ctx) {
		return rt.sleep(ctx, d)
	}
	end := rt.now().Add(d)
	for {
		left := end.Sub(rt.now())
		if left <= 0 {
			return nil
		}
		if err := rt.sleep(ctx, min(readyPoll, left)); err != nil {
			return err
		}
		if rt.answer(ctx) {
			return nil
		}
	}
}

// serversAnswer reports whether the plan's source and target accept a TCP
// connection and the sharding database answers a ping, each within a
// second: a server that is down or restarting refuses the connection (a
// server listens once its recovery is done).
func serversAnswer(ctx context.Context, store *shardmap.Store, p *plans.Plan) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	for _, e := range []plans.Endpoint{p.Source, p.Target} {
		if e.Host == "" {
			continue
		}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(e.Host, strconv.Itoa(e.Port)))
		if err != nil {
			return false
		}
		_ = c.Close()
	}
	return store == nil || store.DB == nil || store.DB.PingContext(ctx) == nil
}

func (rt retrier) do(ctx context.Context) error {
	var deadline time.Time
	var mark int64
	wait := RetryFirstWait
	for {
		err := rt.run(ctx)
		if err == nil || rt.budget <= 0 || ctx.Err() != nil || !rt.retry(err) {
			return err
		}
		now := rt.now()
		if pr := rt.progress(); deadline.IsZero() || pr > mark {
			deadline, mark, wait = now.Add(rt.budget), pr, RetryFirstWait // a new fault
		}
		if rt.urgent != nil && rt.urgent() {
			wait = RetryFirstWait
		}
		left := deadline.Sub(now)
		if left <= 0 {
			return fmt.Errorf("%w (resumed in place for %s, the --retry-for budget, without getting past it)", err, rt.budget)
		}
		w := min(wait, left)
		rt.notify(w, left, err)
		if rt.wait(ctx, w) != nil {
			return err
		}
		wait = min(2*wait, RetryMaxWait)
		if rerr := rt.reload(); rerr != nil {
			return fmt.Errorf("%w; and re-reading the plan to resume it failed: %v", err, rerr)
		}
	}
}
