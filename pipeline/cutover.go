package pipeline

// The forward direction of the blackout (the fence step: blackout.go runs
// it) and the cutover step: the shard-map switch in one transaction, behind
// the fence the fence step left holding.

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/verify"
)

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

// fenceTables is the plan's fence: the source side's.
func fenceTables(p *plans.Plan) []fence.Table { return window.Fence(p, plans.SideSource) }

func fenceNames(p *plans.Plan) []string { return fence.Names(fenceTables(p)) }

// fence takes the moving rows offline: the forward direction of the
// blackout (blackout.go). The source's mappings go offline and its fence
// is installed, and only then is the source's final position read
// (reading it before the fence holds lets writes slip in: vitess #16563);
// the target applies exactly that much. An attempt that cannot fence or
// catch up within the budget (MaxBlackoutMS) is lifted and retried after a
// back-off; the tail keeps running in between. Readiness (lag, long
// transactions: vitess #9525) is checked before each, and the step waits
// while the postpone file exists.
func (r *runner) fence(ctx context.Context) error {
	// Before any blackout: the switch would collide with a location
	// registered by hand where it puts the shard (the full map is read
	// here, not inside the blackout; the cutover looks again only if the
	// switch fails on a duplicate key).
	if err := r.switchCollision(ctx); err != nil {
		return r.unfence(ctx, err) // a run killed mid-attempt may have left its fence armed
	}
	// A resumed run whose source outran the counters' margin: raised again
	// before the attempts check them (idsApart), whether or not the tail
	// was started yet.
	if err := r.raiseOutrun(ctx); err != nil {
		return r.unfence(ctx, fmt.Errorf("raise the target's AUTO_INCREMENT counters again: %w", err))
	}
	ts := fenceTables(r.p)
	arm := ts
	if fault.On("during:fence:half") && len(ts) > 1 {
		// A crash test's point: half the tables armed when the fence row
		// is set, to prove resume copes with a partial arming.
		arm = ts[:len(ts)/2]
	}
	last, err := r.runBlackout(ctx, &blackout{
		side: plans.SideSource, other: "the target",
		db: r.src, schema: r.p.Source.Schema, fence: ts, arm: arm,
		trying: attemptFencing, postponed: "postponed: ", backedOff: "backed off: ",
		wait: r.waitPostpone,
		counters: func(ctx context.Context) error {
			if err := r.idsApart(ctx); err != nil {
				return err
			}
			return r.carryCutoverCounters(ctx, true)
		},
		caughtUp: func(ctx context.Context) (time.Duration, error) {
			if fault.On("fail:fence:ready") { // tests: readiness fails with the fence armed (the tail lost the target)
				return 0, errors.New("injected: the readiness check failed")
			}
			return r.waitCaughtUp(ctx, 0)
		},
		tail: func() *binlog.Tailer { return r.tail },
		offline: func(ctx context.Context) error {
			err := r.env.Store.Apply(ctx, "take the moving mappings offline", r.p.Offline)
			if err == nil {
				fault.Hit("during:fence:offline")
			}
			return err
		},
		// Taking the mappings offline may have failed before it split a
		// range: what it never made is not put back online (a not-found
		// there would turn a lost connection into a refusal).
		online: func(ctx context.Context) error {
			back := shardmap.OnlineAgain(r.p.Offline)
			m, err := r.env.Store.LoadFor(ctx, back) // inside the blackout: the moving points only
			if err != nil {
				return err
			}
			return r.env.Store.Apply(ctx, "put the mappings back online", m.Held(back))
		},
		// The step's end carries the final position, which the cutover reads;
		// it is saved while the target catches up, not after.
		mark: func(final binlog.Position, held bool) {
			if held {
				r.p.Checkpoints.Final = plans.Position(final)
				r.p.Step(plans.StepFence).State = plans.Done
			} else {
				r.p.Step(plans.StepFence).State = plans.Running
			}
		},
		held:        func() bool { return r.p.Step(plans.StepFence).State == plans.Done },
		recheck:     r.recheck,
		faultFenced: "during:fence:half", // the fence row set, half the tables armed
	})
	if last == nil && err == nil {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w (%s) in %d attempts (last: %v); the shard stays online at the source; resume to try again, or raise --max-blackout", ErrBudget, r.p.Options.MaxBlackoutMS.D(), r.p.Options.FenceAttempts, last)
}

// attemptFencing starts the result of a cutover attempt under way; the
// cutover replaces it with "cut over", keeping what follows (readiness's note).
const attemptFencing = "fencing"

// cutover switches the shard map in one transaction once the target holds
// every write the source acknowledged before the fence. Until the switch is
// known to have committed, a failure keeps the fence: a switch whose
// acknowledgement was lost (the sharding database died at its commit) may
// have committed, and a fence lifted then would let a router's cached map
// send writes to the source the map no longer serves. The resume (in place
// within --retry-for, or 'plan resume') applies the switch again, which is
// a no-op where it committed.
func (r *runner) cutover(ctx context.Context) error {
	switched, err := r.cutoverSwitch(ctx)
	if err == nil || switched {
		return err
	}
	r.mu.Lock()
	held := !r.p.Checkpoints.Final.IsZero() // unfence forgets it when it lifts the fence
	r.mu.Unlock()
	if !held {
		return err
	}
	return fmt.Errorf("%w; shard %d stays fenced at its source %s/%s, its mappings offline (writes to it wait or fail), until the switch is confirmed: 'shardctl plan resume %s' switches the map (or 'shardctl plan abort %s' lifts the fence)",
		err, r.p.Source.ShardID, r.p.Source.Addr(), r.p.Source.Schema, r.p.ID, r.p.ID)
}

// cutoverSwitch is the cutover; switched says the shard map was switched
// (an error then is about what follows the switch).
func (r *runner) cutoverSwitch(ctx context.Context) (switched bool, err error) {
	final := binlog.Position(r.p.Checkpoints.Final)
	if final.IsZero() {
		return false, errors.New("no final position recorded: the fence step did not finish")
	}
	if binlog.Position(r.p.Checkpoints.Applied).Compare(final) < 0 {
		// Resumed after a crash between the fence and here: finish the final catch-up.
		if err := r.ensureTail(ctx); err != nil {
			return false, err
		}
		if err := r.tail.WaitFor(ctx, final); err != nil {
			return false, err
		}
	}
	// Before the window's position is read, so a reverse tail never sees the ALTERs.
	counters := time.Now()
	if err := r.carryCutoverCounters(ctx, false); err != nil {
		return false, err
	}
	countersMS := msSince(counters)
	if err := r.windowAtCutover(ctx); err != nil {
		return false, err
	}
	start := time.Now()
	if err := r.env.Store.Apply(ctx, "cut over", r.p.Cutover); err != nil {
		// A location registered by hand since the fence step's check: the
		// shard must not stay offline behind its fence until someone finds it.
		if dbutil.ErrNumber(err) == errDuplicateKey {
			if cerr := r.switchCollision(ctx); cerr != nil {
				return false, r.unfence(ctx, cerr)
			}
		}
		return false, err
	}
	if fault.On("fail:cutover:ack") { // tests: the switch committed, its acknowledgement lost
		return false, fmt.Errorf("cut over: %w (injected: the switch committed and its acknowledgement was lost)", driver.ErrBadConn)
	}
	// The blackout ends here: routers write to the target from this commit on.
	r.mu.Lock()
	if n := len(r.p.Attempts); n > 0 {
		a := &r.p.Attempts[n-1]
		if a.Phases != nil {
			a.Phases["counters"] = countersMS
		}
		// From the fence step's last phase to the switch, the handoff: the
		// step transition (the plan saved with the fence done, the window's position).
		r.p.Result.BlackoutMS = closeAttempt(a, start, attemptFencing, attemptCutOver)
	}
	n := len(r.p.Attempts)
	r.mu.Unlock()
	if n > 0 {
		r.logBlackout("", n-1)
		r.noteAttempt(n - 1)
	}
	if err := r.stopTail(); err != nil {
		return true, fmt.Errorf("cut over done; stopping the binlog tail: %w", err)
	}
	if err := r.finishObjects(ctx); err != nil {
		return true, fmt.Errorf("cut over done; schema objects: %w", err)
	}
	return true, nil
}

const errDuplicateKey = 1062

// switchCollision re-reads the shard map and refuses (ErrMapCollision) a
// cutover that moves the shard's location onto a location another shard id
// holds: the unique key on locations would refuse the switch, and two ids
// for one copy of the rows would route writes past the plan.
func (r *runner) switchCollision(ctx context.Context) error {
	m, err := r.env.Store.Load(ctx)
	if err != nil {
		return fmt.Errorf("re-read the shard map before the switch: %w", err)
	}
	for _, c := range r.p.Cutover {
		if c.Op != shardmap.OpMoveLocation {
			continue
		}
		own, err := m.Location(c.ShardID)
		if err != nil {
			continue // the switch names the missing shard itself
		}
		to := plans.Endpoint{Host: c.Host, Port: c.Port, Schema: own.Schema}
		for _, l := range m.Locations {
			if l.ShardID != c.ShardID && interlock.SameEndpoint(l, to) {
				return fmt.Errorf("%w: the switch would put shard %d at %s/%s, where the shard map already has shard %d's location (registered by hand during this plan, with 'shardctl shardmap add-shard' or SQL, shard map version %d); remove it with 'shardctl shardmap remove-shard --shard %d'",
					ErrMapCollision, c.ShardID, to.Addr(), to.Schema, l.ShardID, m.Version, l.ShardID)
			}
		}
	}
	return nil
}

// unfence lifts the fence the fence step left holding (or a killed run's
// attempt left armed) when the cutover cannot switch (why): the final
// position is forgotten and the fence step made pending, saved before the
// fence goes (a resume must never switch behind a fence that is gone); then
// the fence goes and the mappings are online again, so the shard serves
// from its source until the plan resumes.
func (r *runner) unfence(ctx context.Context, why error) error {
	r.mu.Lock()
	if n := len(r.p.Attempts); n > 0 && !r.p.Checkpoints.Final.IsZero() {
		r.p.Attempts[n-1].Result = "backed off: " + why.Error() // the attempt that held the fence
	}
	r.p.Checkpoints.Final = plans.Position{}
	if s := r.p.Step(plans.StepFence); s != nil {
		s.State = plans.Pending
	}
	if w := r.p.Window; w != nil {
		w.Tail, w.Serving = plans.Position{}, plans.SideSource
	}
	r.mu.Unlock()
	if err := r.save(true); err != nil {
		return fmt.Errorf("%w; the plan could not be saved, so shard %d stays offline and fenced: 'shardctl plan abort %s' lifts the fence (%v)", why, r.p.Source.ShardID, r.p.ID, err)
	}
	bg := context.WithoutCancel(ctx)
	err := fence.Remove(bg, r.src, r.p.Source.Schema, fenceNames(r.p), r.p.Options.LockWaitMS.D())
	if oerr := r.env.Store.Apply(bg, "put the mappings back online", shardmap.OnlineAgain(r.p.Offline)); oerr != nil {
		err = errors.Join(err, oerr)
	}
	if err != nil {
		return fmt.Errorf("%w; lifting the fence failed, shard %d may stay offline and fenced until 'shardctl plan abort %s' or a resume: %v", why, r.p.Source.ShardID, r.p.ID, err)
	}
	return fmt.Errorf("%w; the fence is lifted and shard %d is online at its source %s/%s again", why, r.p.Source.ShardID, r.p.Source.Addr(), r.p.Source.Schema)
}

// windowAtCutover records, behind the forward fence and before the shard map
// points at the target, the target's binlog position: the reverse tail starts
// there, so it sees the application's writes on the target and nothing of
// the forward tail's.
func (r *runner) windowAtCutover(ctx context.Context) error {
	w := r.p.Window
	if w == nil || !w.Tail.IsZero() {
		return nil
	}
	pos, err := binlog.MasterStatus(ctx, r.dst)
	if err != nil {
		return fmt.Errorf("reverse window: read the target's binlog position: %w", err)
	}
	r.mu.Lock()
	w.Tail, w.Serving = plans.Position(pos), plans.SideTarget
	w.Forward = r.p.Cutover // a split's new shard id is known now
	r.mu.Unlock()
	return r.save(true)
}

// recheck compares the deferred verify chunks once more, within d, behind
// the fence: the source is still and the target has all of it, so the
// comparison is exact. A difference is an ErrMismatch.
func (r *runner) recheck(ctx context.Context, d time.Duration) (bool, error) {
	if len(r.p.Checkpoints.Deferred) == 0 {
		return false, nil
	}
	vctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	differ, err := r.recheckChunks(vctx)
	if err != nil {
		if ctx.Err() == nil && vctx.Err() != nil {
			return true, fmt.Errorf("re-checking %d changing chunks did not fit the budget", len(r.p.Checkpoints.Deferred))
		}
		return true, err
	}
	if len(differ) > 0 {
		c := differ[0]
		return true, fmt.Errorf("%w: %s rows (%s]..(%s] differ behind the fence: source %d rows, target %d rows", ErrMismatch, c.Table,
			strings.Join(c.Lo, ","), strings.Join(c.Hi, ","), c.SourceRows, c.TargetRows)
	}
	return true, nil
}

// waitPostpone holds the cutover while the postpone file exists or the
// before-fence hook fails; the tail keeps the target close behind.
func (r *runner) waitPostpone(ctx context.Context) error {
	f := r.p.Options.PostponeFile
	logged := ""
	for {
		why := ""
		if _, err := os.Stat(f); f != "" && err == nil {
			why = "postponed: remove " + f + " to cut over"
		} else if err := r.hook(ctx, HookBeforeFence, plans.StepFence); err != nil {
			why = "postponed by the before-fence hook: " + err.Error()
		}
		if why == "" {
			return nil
		}
		if why != logged {
			r.env.Log.Info("cutover "+why, "file", f)
			r.env.Observer.Progress(plans.StepFence, 0, 0, why)
			logged = why
		}
		if _, err := r.waitCaughtUp(ctx, 0); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// recheckChunks compares the deferred verify chunks once more.
func (r *runner) recheckChunks(ctx context.Context) ([]verify.Chunk, error) {
	v := &verify.Verifier{Source: r.src, Target: r.dst, SourceSchema: r.p.Source.Schema, TargetSchema: r.p.Target.Schema, Threads: r.p.Options.VerifyThreads}
	var differ []verify.Chunk
	for _, t := range r.p.Copy {
		var cs []verify.Chunk
		for _, d := range r.p.Checkpoints.Deferred {
			if d.Table == t.Name {
				cs = append(cs, verify.Chunk{Range: d})
			}
		}
		if len(cs) == 0 {
			continue
		}
		d, err := v.Recheck(ctx, t, cs)
		if err != nil {
			return nil, err
		}
		differ = append(differ, d...)
	}
	return differ, nil
}
