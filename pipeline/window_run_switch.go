package pipeline

// The reverse window's switch: the reverse direction of the blackout
// (blackout.go) and the switch that ends a good attempt.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

func (wr *windowRun) waitPostpone(ctx context.Context) error {
	f := wr.r.p.Options.PostponeFile
	for f != "" {
		if _, err := os.Stat(f); err != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}

// revert switches to the other side: the reverse direction of the
// blackout (blackout.go), with the forward cutover's back-off, readiness
// checks, postpone file and armed fence. The serving side is fenced and its
// mappings go offline; the other side catches up; finishSwitch points the
// shard map at it.
func (wr *windowRun) revert(ctx context.Context) error {
	r := wr.r
	l := r.leg(r.p.Window.Serving)
	ts := window.Fence(r.p, l.serving)
	last, err := r.runBlackout(ctx, &blackout{
		label: "reverse window: ", side: l.serving, other: "the " + window.Other(l.serving) + " copy",
		db: l.from, schema: l.fromEP.Schema, fence: ts, arm: ts,
		trying: "switching to the " + window.Other(l.serving), postponed: "switch postponed: ", backedOff: "switch backed off: ",
		wait: wr.waitPostpone,
		counters: func(ctx context.Context) error {
			return r.carryCounters(ctx, l.from, l.fromEP.Schema, l.to, l.toEP.Schema, window.Tables(r.p), true)
		},
		caughtUp: func(ctx context.Context) (time.Duration, error) { return wr.caughtUp(ctx, 0) },
		tail:     func() *binlog.Tailer { return wr.tail },
		offline: func(ctx context.Context) error {
			return r.env.Store.Apply(ctx, "reverse window: take the mappings offline", window.OffChanges(r.p, l.serving))
		},
		online: func(ctx context.Context) error { return wr.servingOnline(ctx, l.serving) },
		mark: func(final binlog.Position, held bool) {
			if held {
				r.p.Window.Final = plans.Position(final)
			} else {
				r.p.Window.Final, r.p.Window.Next = plans.Position{}, plans.Position{}
			}
		},
		held:       func() bool { return !r.p.Window.Final.IsZero() },
		saveFirst:  true,
		done:       wr.finishSwitch,
		faultArmed: "during:revert:armed", // crash with the serving side armed, not fenced
		faultFinal: "during:revert",
	})
	if last == nil && err == nil {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: no switch fitted the %s blackout budget in %d attempts (last: %v); the %s keeps serving and the window goes on",
		window.ErrNotNow, r.p.Options.MaxBlackoutMS.D(), r.p.Options.FenceAttempts, last, l.serving)
}

// finishSwitch completes a switch whose final position is recorded (the
// serving side is fenced, its mappings offline): the other side gets
// everything up to that position, its own position is recorded for the next
// tail, its fence is lifted, and the shard map points at it. A resume after
// a crash anywhere in here runs it again: every part is idempotent.
func (wr *windowRun) finishSwitch(ctx context.Context, start time.Time, idx int) error {
	r, w := wr.r, wr.r.p.Window
	l := r.leg(w.Serving)
	r.mu.Lock()
	final, behind := w.Final, binlog.Position(w.Tail).Compare(binlog.Position(w.Final)) < 0
	r.mu.Unlock()
	if behind {
		if err := wr.ensure(ctx); err != nil {
			return err
		}
		if err := wr.tail.WaitFor(ctx, binlog.Position(final)); err != nil {
			return fmt.Errorf("reverse window: final catch-up to %s: %w", final, err)
		}
		r.mu.Lock()
		w.Tail = final // the tail's own checkpoint is saved lazily
		r.mu.Unlock()
	}
	// Before the other side's position is read, so the next tail never sees the ALTERs.
	if err := r.carryCounters(ctx, l.from, l.fromEP.Schema, l.to, l.toEP.Schema, window.Tables(r.p), false); err != nil {
		return fmt.Errorf("reverse window: %w", err)
	}
	if w.Next.IsZero() {
		next, err := binlog.MasterStatus(ctx, l.to)
		if err != nil {
			return fmt.Errorf("reverse window: read the %s's binlog position: %w", window.Other(l.serving), err)
		}
		r.mu.Lock()
		w.Next = plans.Position(next)
		r.mu.Unlock()
	}
	if err := r.save(true); err != nil {
		return err
	}
	lift := time.Now()
	if err := fence.Remove(ctx, l.to, l.toEP.Schema, fence.Names(window.Fence(r.p, window.Other(l.serving))), wr.lockWait()); err != nil {
		return fmt.Errorf("reverse window: lift the fence on the %s: %w", window.Other(l.serving), err)
	}
	changes := w.Revert
	if l.serving == plans.SideSource {
		changes = w.Forward
	}
	cut := time.Now()
	if err := r.env.Store.Apply(ctx, "reverse window: switch to the "+window.Other(l.serving), changes); err != nil {
		return err
	}
	r.mu.Lock()
	wr.gen++
	w.Serving, w.Tail, w.Final, w.Next = window.Other(l.serving), w.Next, plans.Position{}, plans.Position{}
	sw := plans.Switch{At: time.Now().UTC(), To: w.Serving}
	if idx >= 0 {
		a := &r.p.Attempts[idx]
		a.Phases["lift"] = float64(cut.Sub(lift).Microseconds()) / 1000 // the other side's fence lifted
		// The rest since the last phase, the handoff: the plan saved, the
		// other side's position read (as the cutover's).
		sw.BlackoutMS = closeAttempt(a, cut, "switching to the "+w.Serving, attemptSwitched+w.Serving)
	}
	w.Switches = append(w.Switches, sw)
	r.mu.Unlock()
	if err := r.save(true); err != nil {
		return err
	}
	r.env.Log.Info("reverse window: switched", "serving", w.Serving, "blackout_ms", sw.BlackoutMS)
	// The old tail stops before the new one starts: the new one's writes
	// land in the old serving side's binlog and must not be read back.
	if err := wr.stopTail(); err != nil {
		r.env.Log.Warn("reverse window: stopping the old tail", "err", err)
	}
	return wr.ensure(ctx)
}

// servingOnline puts the serving side's mappings back online (backChanges),
// whether a switch's offline change was applied or not: one change at a
// time, as a merged range's mapping no longer exists to be set online.
func (wr *windowRun) servingOnline(ctx context.Context, serving string) error {
	r := wr.r
	for _, c := range window.BackChanges(r.p, serving) {
		err := r.env.Store.Apply(ctx, "reverse window: serving side online", []shardmap.Change{c})
		if err != nil && !(c.Op == shardmap.OpSetStatus && errors.Is(err, shardmap.ErrNotFound)) {
			return err
		}
	}
	return nil
}
