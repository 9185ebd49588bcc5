// Package pipeline runs a plan: the one pipeline behind move, split and merge.
// Operations differ only in the plan they build (rows to copy, rows to fence,
// shard-map changes, cleanup); the steps below are the same for all of them:
//
//	preflight, create, copy, catchup, verify, fence, cutover, cleanup
//
// Every step is recorded in the plan file before and after it runs, and each
// is safe to run again, so a crash at any point is continued by Resume.
package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"sync"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

// Errors callers map to exit codes.
var (
	ErrRefused  = failure.ErrRefused // preflight: nothing was changed
	ErrPurged   = errors.New("binlog position purged")
	ErrMismatch = errors.New("verify found differences")
	ErrCutOver  = errors.New("already cut over")
)

// Observer is told what the pipeline does; cmd renders it as progress bars or log lines.
type Observer interface {
	Step(name, state string)                                // state: started, done, skipped, failed
	Progress(step string, done, total int64, detail string) // rows or events so far
}

// AttemptObserver is an Observer that is also told of each cutover attempt
// as it starts and as it ends (n counts from 1). Optional, so other observers need not change.
type AttemptObserver interface {
	Attempt(n int, a plans.Attempt)
}

// NopObserver ignores everything.
type NopObserver struct{}

func (NopObserver) Step(string, string)                   {}
func (NopObserver) Progress(string, int64, int64, string) {}

// Env is what a run needs besides the plan.
type Env struct {
	Store    *shardmap.Store // the sharding database
	Creds    dbutil.Creds    // shard servers; never stored in the plan
	PlanPath string
	Observer Observer
	Log      *slog.Logger
	// Saved is called after each save of the plan file while the run holds
	// the shard's lock (the copy in the sharding database); it logs its own failures.
	Saved func(*plans.Plan)
	// Hook runs the operator's hook for point (see Hook* constants); nil: none.
	Hook func(ctx context.Context, point string, p *plans.Plan, step string) error
	// Pools, when set, are a planning run's shared connections (WithPools).
	Pools *Pools
}

// runner is one run of one plan.
type runner struct {
	env      Env
	p        *plans.Plan
	src, dst *sql.DB
	release  []func() // closes src and dst (pools a planning run shares stay open)

	mu           sync.Mutex // guards p while copy/tail goroutines update checkpoints
	saving       sync.Mutex // one save at a time (held while writing, without mu)
	lastSave     time.Time
	saveErr      error // an unforced save's failure, for the next save to return (guarded by saving)
	tail         *binlog.Tailer
	thr          *Throttler
	floors       map[string]map[string]uint64 // per receiving schema, what its AUTO_INCREMENT counters are at least since the last carry (autoinc.go)
	throttleKind string                       // the last throttle reason told, without its figures (throttle.go)
}

// Run executes the plan's remaining steps. It holds the plan's locks for the
// whole run. On failure the plan is saved as stopped and can be resumed.
// Long on purpose: the order of locks, checks, hooks, saves and steps is the
// run's contract, and it reads best in one place.
func Run(ctx context.Context, env Env, p *plans.Plan) error {
	if env.Observer == nil {
		env.Observer = NopObserver{}
	}
	if env.Log == nil {
		env.Log = slog.New(slog.DiscardHandler)
	}
	switch p.State {
	case plans.StateDone:
		return nil
	case plans.StateAborted:
		return fmt.Errorf("%w: plan %s was aborted; make a new plan", ErrRefused, p.ID)
	}
	l, err := lockPlan(ctx, env, p, "")
	if err != nil {
		return err
	}
	defer l.Release()
	ctx, cancel := l.Bind(ctx, fmt.Errorf("%w; stopped safely, resume the plan", ErrLockLost))
	defer cancel(nil)
	go func() { // said at once: the step stops only where it next looks
		<-ctx.Done()
		if errors.Is(context.Cause(ctx), ErrLockLost) {
			env.Log.Warn("lost the operation lock on the sharding database: the run stops safely", "plan", p.ID)
		}
	}()

	r := &runner{env: env, p: p}
	defer r.close()
	// A server that cannot be reached fails the step the run was to
	// continue with, not a preflight a resumed plan passed long ago.
	if err := r.open(ctx); err != nil {
		return r.fail(p.NextStep(), err)
	}
	if r.thr, err = r.openThrottler(ctx); err != nil {
		return r.fail(p.NextStep(), err)
	}
	if err := r.runChecks(ctx); err != nil {
		return err // refused before anything changed: the plan file is left as it was
	}
	// The plan-start hook may veto the run: before anything is saved, so a
	// veto leaves the plan as it was (a new plan: nothing to resume).
	if err := r.hook(ctx, HookPlanStart, p.NextStep()); err != nil {
		_ = r.hook(context.Background(), HookOnFailure, p.NextStep())
		return fmt.Errorf("%w: the plan-start hook refused plan %s: %v", ErrRefused, p.ID, err)
	}
	p.State = plans.StateRunning
	if err := r.save(true); err != nil {
		return err
	}
	for _, s := range p.Steps { // plans.Steps, plus the window where the plan has one
		name := s.Name
		if p.Done(name) {
			continue
		}
		rec := p.Step(name)
		rec.State, rec.Started, rec.Error, rec.Throttled = plans.Running, time.Now().UTC(), "", ""
		rec.Attempts++
		// The cutover starts inside the blackout, right after the fence step's
		// end was saved: its start rides on the next save (a crash before then
		// resumes at the cutover all the same).
		if err := r.save(name != plans.StepCutover); err != nil {
			return err
		}
		env.Observer.Step(name, "started")
		run := r.step(name)
		if run == nil {
			return r.fail(name, fmt.Errorf("plan %s has a step %q this shardctl does not know: run it with the version that made it", p.ID, name))
		}
		err := run(ctx)
		if err == nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if errors.Is(err, errSkipped) {
			rec.State = plans.Skipped
			env.Observer.Step(name, "skipped")
		} else if err != nil {
			if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
				err = fmt.Errorf("%w (%v)", err, c)
			}
			return r.fail(name, err)
		} else {
			rec.State = plans.Done
			env.Observer.Step(name, "done")
		}
		rec.Ended, rec.Throttled = time.Now().UTC(), ""
		if p.Result.StepSeconds == nil {
			p.Result.StepSeconds = map[string]float64{}
		}
		p.Result.StepSeconds[name] += rec.Ended.Sub(rec.Started).Seconds()
		// The fence step saved its end itself, inside the blackout and
		// alongside the final catch-up; the rest rides on the next save.
		if err := r.save(name != plans.StepFence); err != nil {
			return err
		}
		r.afterStep(ctx, name)
		fault.Hit("after:" + name)
	}
	p.State = plans.StateDone
	if window.Reverted(p) {
		p.State = plans.StateAborted // the window ended with the source serving: the move was undone
	}
	if err := r.save(true); err != nil {
		return err
	}
	if p.Done(plans.StepCleanup) {
		_ = r.hook(ctx, HookAfterCleanup, plans.StepCleanup) // it sees the plan done
	}
	return nil
}

var errSkipped = errors.New("skipped")

// step is one step of the pipeline: its name (as plans record it) and the method that runs it.
type step struct {
	name string
	run  func(*runner, context.Context) error
}

// steps is the pipeline, in order. A plan lists the steps it runs
// (plans.Steps, plus the window where it has one), always in this order.
var steps = []step{
	{plans.StepPreflight, (*runner).preflight},
	{plans.StepCreate, (*runner).create},
	{plans.StepCopy, (*runner).copy},
	{plans.StepCatchup, (*runner).catchup},
	{plans.StepVerify, (*runner).verify},
	{plans.StepFence, (*runner).fence},     // blackout.go
	{plans.StepCutover, (*runner).cutover}, // blackout.go
	{plans.StepWindow, (*runner).window},   // window_run.go
	{plans.StepCleanup, (*runner).cleanup},
}

// step returns the method that runs the named step, or nil.
func (r *runner) step(name string) func(context.Context) error {
	for _, s := range steps {
		if s.name == name {
			return func(ctx context.Context) error { return s.run(r, ctx) }
		}
	}
	return nil
}

// fail records a step's failure and leaves the plan resumable.
func (r *runner) fail(step string, err error) error {
	if outOfSpace(err) {
		full := r.p.Target
		if w := r.p.Window; step == plans.StepWindow && w != nil && w.Serving == plans.SideTarget {
			full = r.p.Source // the reverse tail writes there
		}
		err = fmt.Errorf("the server %s is out of space: %w", full.Addr(), err)
	}
	err = classify(r.p.Operation, r.shardName(), step, r.p.ID, err)
	r.mu.Lock()
	if rec := r.p.Step(step); rec != nil {
		rec.State, rec.Error, rec.Ended, rec.Throttled = plans.Failed, err.Error(), time.Now().UTC(), ""
	}
	r.p.State = plans.StateStopped
	r.mu.Unlock()
	r.env.Observer.Step(step, "failed")
	if serr := r.save(true); serr != nil {
		return errors.Join(err, serr)
	}
	_ = r.hook(context.Background(), HookOnFailure, step)
	return err
}

func (r *runner) shardName() string {
	return fmt.Sprintf("shard %d (%s)", r.p.Source.ShardID, r.p.Source.Schema)
}

// save writes the plan file; unless force, at most every 500 ms (callers that
// checkpoint per chunk call it often; a resume re-does at most that much).
// It writes a snapshot taken under r.mu, so the file and the sharding
// database's copy are written without holding up the tail's checkpoints (a
// save inside the blackout runs alongside the final catch-up). Saves are
// written one at a time, in order; an unforced one skips while another runs.
// An unforced save is written in the background: its two fsyncs and the
// sharding database's copy would otherwise stall the copy's writers, which
// checkpoint while holding their watermark (measured in docs/BENCHMARKS-history.md);
// its failure is returned by the next unforced save. A forced save waits for
// it, then writes its own snapshot and returns its own outcome.
func (r *runner) save(force bool) error {
	if !force {
		if !r.saving.TryLock() {
			return nil
		}
	} else {
		r.saving.Lock()
	}
	held := true
	defer func() {
		if held {
			r.saving.Unlock()
		}
	}()
	if err := r.saveErr; err != nil && !force { // guarded by r.saving; a forced save writes anew
		r.saveErr = nil
		return err
	}
	r.saveErr = nil
	r.mu.Lock()
	if !force && time.Since(r.lastSave) < 500*time.Millisecond {
		r.mu.Unlock()
		return nil
	}
	r.lastSave = time.Now()
	if r.env.PlanPath == "" {
		r.mu.Unlock()
		return nil
	}
	snap, err := plans.Clone(r.p)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if !force {
		held = false
		go func() {
			defer r.saving.Unlock()
			r.saveErr = r.write(snap)
		}()
		return nil
	}
	return r.write(snap)
}

// write saves snap as the plan file and hands it to Saved.
func (r *runner) write(snap *plans.Plan) error {
	if err := plans.Save(r.env.PlanPath, snap); err != nil {
		return err
	}
	r.mu.Lock()
	r.p.Revision, r.p.UpdatedAt = snap.Revision, snap.UpdatedAt // plans.Save set them on the snapshot
	r.mu.Unlock()
	if r.env.Saved != nil {
		r.env.Saved(snap)
	}
	return nil
}

func (r *runner) open(ctx context.Context) error {
	var err error
	var release func()
	if r.src, release, err = r.env.open(ctx, addrOf(r.p.Source)); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	r.release = append(r.release, release)
	if r.dst, release, err = r.env.open(ctx, addrOf(r.p.Target)); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	r.release = append(r.release, release)
	return nil
}

func (r *runner) close() {
	if r.tail != nil {
		_ = r.stopTail()
	}
	if r.thr != nil {
		r.thr.Close()
	}
	for _, release := range r.release {
		release()
	}
	r.release = nil
}

func addrOf(e plans.Endpoint) dbutil.Addr { return dbutil.Addr{Host: e.Host, Port: e.Port} }

// ensureTail starts the binlog tail from the last applied checkpoint (or the
// recorded start) unless it runs already.
func (r *runner) ensureTail(ctx context.Context) error {
	if r.tail != nil {
		select {
		case <-r.tail.Done():
			return fmt.Errorf("binlog tail stopped: %w", r.tail.Err())
		default:
			return nil
		}
	}
	r.mu.Lock()
	from := r.p.Checkpoints.Applied
	if from.IsZero() {
		from = r.p.Checkpoints.Start
	}
	r.mu.Unlock()
	moved, err := r.sourceMoved(ctx, binlog.Position(from))
	if err != nil {
		return err
	}
	purged := false
	if !moved {
		if purged, err = binlog.Purged(ctx, r.src, binlog.Position(from)); err != nil {
			return err
		}
	}
	if purged {
		return fmt.Errorf("%w: the source no longer has binlog %s, so changes since the copy cannot be replayed; this plan cannot cut over: abort it ('shardctl plan abort %s') and start a new one, with a binlog retention on the source (binlog_expire_logs_seconds) longer than the copy takes", ErrPurged, from.File, r.p.ID)
	}
	fks, err := tables.ForeignKeys(ctx, r.src, r.p.Source.Schema)
	if err != nil {
		return err
	}
	if err := r.raiseOutrun(ctx); err != nil {
		return fmt.Errorf("raise the target's AUTO_INCREMENT counters again: %w", err)
	}
	t, err := binlog.Start(ctx, binlog.Config{
		Source:       addrOf(r.p.Source),
		Creds:        r.env.Creds,
		Schema:       r.p.Source.Schema,
		Target:       r.dst,
		TargetSchema: r.p.Target.Schema,
		Tables:       r.p.Copy,
		ServerID:     tailServerID(),
		Start:        binlog.Position(from),
		Checkpoint: func(_ context.Context, pos binlog.Position) error {
			r.mu.Lock()
			r.p.Checkpoints.Applied = plans.Position(pos)
			r.mu.Unlock()
			return r.save(false)
		},
		Logger:    r.env.Log,
		Throttle:  func(ctx context.Context) error { return r.thr.Wait(ctx, 0) },
		Cascading: tables.CascadingParents(fks, r.p.Source.Schema),
		OnDDL:     r.p.Options.OnDDL,
		OnCarried: r.carriedDDL,
		// The target's own keys' rows are never replaced by the moving ones.
		IntoExisting: operation.Of(r.p.Operation).IntoExisting,
		IDGuards:     r.idGuards(),
	})
	if err != nil {
		return fmt.Errorf("start binlog tail from %s: %w", from, err)
	}
	r.tail = t
	return nil
}

// stopTail stops the tail and saves its final checkpoint.
func (r *runner) stopTail() error {
	if r.tail == nil {
		return nil
	}
	err := r.endTail(r.tail, func(p binlog.Position) { r.p.Checkpoints.Applied = plans.Position(p) })
	r.tail = nil
	return err
}

// endTail stops t, counts what it applied and saves the plan; keep, if
// set, records where t stopped (called under r.mu). The forward tail and
// the reverse window's tail both end this way.
func (r *runner) endTail(t *binlog.Tailer, keep func(binlog.Position)) error {
	err := t.Stop()
	st := t.Stats()
	r.env.Log.Info("binlog tail stopped", "rows_applied", st.RowsApplied, "batches", st.Batches, "parallel_batches", st.Parallel, "lock_retries", st.LockRetries)
	r.mu.Lock()
	r.p.Result.EventsApplied += st.RowsApplied
	if keep != nil && !st.Applied.IsZero() {
		keep(st.Applied)
	}
	r.mu.Unlock()
	if serr := r.save(true); serr != nil && err == nil {
		err = serr
	}
	return err
}

// tailServerID is a replica id for a binlog tail, random so tails of
// parallel runs do not collide with each other or with real replicas.
func tailServerID() uint32 {
	return uint32(dbutil.TailServerIDMin + rand.Intn(dbutil.TailServerIDSpan))
}

// waitCaughtUp waits until the target applied everything up to the source's current position.
func (r *runner) waitCaughtUp(ctx context.Context, limit time.Duration) (time.Duration, error) {
	if err := r.ensureTail(ctx); err != nil {
		return 0, err
	}
	took, err := waitForSource(ctx, r.tail, r.src, limit)
	if err != nil {
		return took, err
	}
	r.lag(took)
	return took, nil
}

// waitForSource waits (at most limit, if set) until t applied src's
// current position, and says how long that took.
func waitForSource(ctx context.Context, t *binlog.Tailer, src *sql.DB, limit time.Duration) (time.Duration, error) {
	pos, err := binlog.MasterStatus(ctx, src)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	wctx := ctx
	if limit > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	err = t.WaitFor(wctx, pos)
	return time.Since(start), err
}
