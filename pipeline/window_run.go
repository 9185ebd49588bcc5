package pipeline

// The runner's part of the reverse-replication window (what it is, and
// everything that is a function of the plan, is pipeline/window): the tail
// and the fence on the side that does not serve, recovery after a crash,
// the step's loop and its end. The switch is window_run_switch.go (the
// reverse direction of the one blackout loop, blackout.go), carrying out
// requests window_run_request.go, an end that leaves the source serving
// window_run_end.go, and what a window needs of the target
// pipeline/checks/check_window.go.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/tables"
)

// leg is one direction: the serving side's binlog applied to the other side's copy.
type leg struct {
	serving      string
	from, to     *sql.DB
	fromEP, toEP plans.Endpoint
}

func (r *runner) leg(serving string) leg {
	if serving == plans.SideSource {
		return leg{serving: serving, from: r.src, to: r.dst, fromEP: r.p.Source, toEP: r.p.Target}
	}
	return leg{serving: plans.SideTarget, from: r.dst, to: r.src, fromEP: r.p.Target, toEP: r.p.Source}
}

// windowRun is the window's tail and its switches.
type windowRun struct {
	r    *runner
	tail *binlog.Tailer
	gen  int // bumped at each switch: a stopping old tail's checkpoint is ignored
}

func (wr *windowRun) lockWait() time.Duration {
	return wr.r.p.Options.LockWaitMS.D()
}

// ensure keeps the non-serving copy fenced and the tail running.
func (wr *windowRun) ensure(ctx context.Context) error {
	if wr.tail != nil {
		select {
		case <-wr.tail.Done():
			err := wr.tail.Err()
			wr.tail = nil
			return fmt.Errorf("reverse window: binlog tail stopped: %w", err)
		default:
			return nil
		}
	}
	r, w := wr.r, wr.r.p.Window
	l := r.leg(w.Serving)
	if err := fence.Install(ctx, l.to, l.toEP.Schema, window.Fence(r.p, window.Other(l.serving)), wr.lockWait()); err != nil {
		return fmt.Errorf("reverse window: fence the %s copy %s: %w", window.Other(l.serving), l.toEP.Schema, err)
	}
	r.mu.Lock()
	from, gen := w.Tail, wr.gen
	r.mu.Unlock()
	if purged, err := binlog.Purged(ctx, l.from, binlog.Position(from)); err != nil {
		return err
	} else if purged {
		return fmt.Errorf("%w: the %s %s no longer has binlog %s, so the %s copy cannot be kept in sync; complete the window ('shardctl plan complete %s')", ErrPurged, l.serving, l.fromEP.Addr(), from.File, window.Other(l.serving), r.p.ID)
	}
	if err := r.swapWindowTriggers(ctx, l); err != nil {
		return err
	}
	fks, err := tables.ForeignKeys(ctx, l.from, l.fromEP.Schema)
	if err != nil {
		return fmt.Errorf("reverse window: read the foreign keys of %s: %w", l.fromEP.Schema, err)
	}
	cfg := binlog.Config{
		Cascading: tables.CascadingParents(fks, l.fromEP.Schema), // deletes that cascade are repeated, as forward
		Source:    addrOf(l.fromEP), Creds: r.env.Creds, Schema: l.fromEP.Schema,
		Target: l.to, TargetSchema: l.toEP.Schema, Tables: window.Tables(r.p),
		ServerID: tailServerID(),
		Start:    binlog.Position(from),
		Checkpoint: func(_ context.Context, pos binlog.Position) error {
			r.mu.Lock()
			if wr.gen == gen && w.Serving == l.serving {
				w.Tail = plans.Position(pos)
			}
			r.mu.Unlock()
			return r.save(false)
		},
		Logger:     r.env.Log,
		SessionSQL: []string{fence.BypassSQL}, // the copy is fenced against the application, not against the tail
	}
	if r.thr != nil {
		cfg.Throttle = func(ctx context.Context) error { return r.thr.Wait(ctx, 0) }
	}
	t, err := binlog.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("reverse window: start the tail from the %s at %s: %w", l.serving, from, err)
	}
	wr.tail = t
	return nil
}

func (wr *windowRun) stopTail() error {
	if wr.tail == nil {
		return nil
	}
	err := wr.r.endTail(wr.tail, nil)
	wr.tail = nil
	return err
}

// caughtUp waits (at most limit, if set) until the tail applied the serving side's current position.
func (wr *windowRun) caughtUp(ctx context.Context, limit time.Duration) (time.Duration, error) {
	if err := wr.ensure(ctx); err != nil {
		return 0, err
	}
	return waitForSource(ctx, wr.tail, wr.r.leg(wr.r.p.Window.Serving).from, limit)
}

// measureLag records how long the tail needs to reach the serving side's position.
func (wr *windowRun) measureLag(ctx context.Context) error {
	took, err := wr.caughtUp(ctx, 2*time.Second)
	r, w := wr.r, wr.r.p.Window
	r.mu.Lock()
	if err == nil {
		w.LagMS, w.CaughtUpAt = float64(took.Microseconds())/1000, time.Now().UTC()
	} else {
		since := w.CaughtUpAt
		if since.IsZero() {
			since = w.Until.Add(-time.Duration(w.DurationS) * time.Second)
		}
		w.LagMS = float64(time.Since(since).Milliseconds())
	}
	r.mu.Unlock()
	if err != nil && ctx.Err() == nil && wr.tail != nil {
		select {
		case <-wr.tail.Done():
			return err
		default:
			err = nil // slow, not broken
		}
	}
	if serr := r.save(true); err == nil {
		err = serr
	}
	return err
}

// restore brings a window back to a steady state after a crash: a switch
// interrupted behind its fence is finished; otherwise the serving side is
// writable and online (an interrupted, backed-off attempt may have left its
// fence or offline mappings).
func (wr *windowRun) restore(ctx context.Context) error {
	r, w := wr.r, wr.r.p.Window
	if !w.Final.IsZero() {
		return wr.finishSwitch(ctx, time.Time{}, -1)
	}
	l := r.leg(w.Serving)
	if err := fence.Remove(ctx, l.from, l.fromEP.Schema, fence.Names(window.Fence(r.p, l.serving)), wr.lockWait()); err != nil {
		return fmt.Errorf("reverse window: %w", err)
	}
	return wr.servingOnline(ctx, l.serving)
}

// window is the step between cutover and cleanup: it runs the tail, carries
// out revert and complete requests, and ends at the window's end time.
func (r *runner) window(ctx context.Context) error {
	w := r.p.Window
	if w == nil {
		return errSkipped
	}
	wr := &windowRun{r: r}
	defer func() { _ = wr.stopTail() }()
	r.mu.Lock()
	if w.Until.IsZero() {
		w.Until = time.Now().UTC().Add(time.Duration(w.DurationS) * time.Second)
	}
	r.mu.Unlock()
	if err := r.save(true); err != nil {
		return err
	}
	if err := wr.restore(ctx); err != nil {
		return err
	}
	if w.Completing {
		return wr.complete(ctx, "")
	}
	r.env.Log.Info("reverse window open", "until", w.Until.Format(time.RFC3339), "serving", w.Serving)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastLag, measured, failed := time.Time{}, 0, 0
	for {
		if err := wr.ensure(ctx); err != nil {
			// A tail that broke on a schema change or a purged binlog cannot go
			// on; a lost connection may: a few tries, then the plan stops.
			if failed++; failed >= 5 || errors.Is(err, binlog.ErrDDL) || errors.Is(err, ErrPurged) || ctx.Err() != nil {
				return err
			}
			r.env.Log.Warn("reverse window: tail stopped; starting it again", "err", err, "try", failed)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(failed) * 2 * time.Second):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		req, err := window.Take(r.env.PlanPath)
		if err != nil {
			r.env.Log.Warn("reverse window: unreadable request ignored", "err", err)
		}
		if req != nil {
			r.env.Log.Info("reverse window: request", "action", req.Action, "id", req.ID)
			switch req.Action {
			case window.ActionRevert:
				err := wr.revert(ctx)
				r.recordRequest(req, err)
				if err != nil && !errors.Is(err, window.ErrNotNow) {
					return err
				}
			case window.ActionComplete:
				r.recordRequest(req, nil)
				return wr.complete(ctx, "completed by request")
			default:
				r.recordRequest(req, fmt.Errorf("unknown action %q", req.Action))
			}
			continue
		}
		if time.Now().After(w.Until) {
			return wr.complete(ctx, "the window ended")
		}
		if time.Since(lastLag) >= time.Second {
			if err := wr.measureLag(ctx); err != nil {
				return err
			}
			lastLag, failed = time.Now(), 0
			r.env.Observer.Progress(plans.StepWindow, 0, 0, fmt.Sprintf("serving: %s; reverse tail lag %.0f ms; ends %s", w.Serving, w.LagMS, w.Until.Format(time.RFC3339)))
			if measured++; measured == 3 {
				fault.Hit("during:window")
			}
		}
	}
}

// complete ends the window: the tail stops and the cleanup step follows.
func (wr *windowRun) complete(ctx context.Context, reason string) error {
	r, w := wr.r, wr.r.p.Window
	r.mu.Lock()
	w.Completing = true
	if w.EndReason == "" {
		w.EndReason = reason
	}
	r.mu.Unlock()
	if err := r.save(true); err != nil {
		return err
	}
	if err := wr.stopTail(); err != nil {
		r.env.Log.Warn("reverse window: stopping the tail", "err", err)
	}
	fault.Hit("during:complete")
	r.mu.Lock()
	w.Ended = time.Now().UTC()
	r.mu.Unlock()
	r.env.Log.Info("reverse window ended", "reason", w.EndReason, "serving", w.Serving)
	return ctx.Err()
}

// swapWindowTriggers readies both copies for a window tail along l: the copy
// that does not serve receives the tail's writes, which must not fire its
// triggers (the serving side's binlog already carries what they wrote), so its
// triggers are guarded (the tail's session passes them); the serving side's
// are put back exact, since a switch may have swapped the roles. Guarded
// triggers behave the same for the application, so the order is free and a
// crash between the two is harmless; both are idempotent.
func (r *runner) swapWindowTriggers(ctx context.Context, l leg) error {
	ts := window.Tables(r.p)
	exact, err := triggersOn(ctx, l.from, l.fromEP.Schema, ts)
	if err != nil {
		return fmt.Errorf("reverse window: read the triggers of %s: %w", l.fromEP.Schema, err)
	}
	if err := schemaobj.Replace(ctx, l.from, l.fromEP.Schema, l.fromEP.Schema, exact, false); err != nil {
		return fmt.Errorf("reverse window: restore the triggers of the serving %s: %w", l.serving, err)
	}
	guard, err := triggersOn(ctx, l.to, l.toEP.Schema, ts)
	if err != nil {
		return fmt.Errorf("reverse window: read the triggers of %s: %w", l.toEP.Schema, err)
	}
	if err := schemaobj.Replace(ctx, l.to, l.toEP.Schema, l.toEP.Schema, guard, true); err != nil {
		return fmt.Errorf("reverse window: guard the triggers of the %s copy: %w", window.Other(l.serving), err)
	}
	return nil
}
