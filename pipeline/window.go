package pipeline

// The reverse-replication window (issue 12): after a cutover the side that
// no longer serves keeps its copy, fenced against the application, and a
// tail from the serving side's binlog keeps it in sync. A switch ('plan
// revert') runs the cutover's blackout in the other direction: mappings
// offline, fence on the serving side, final catch-up to the position read
// behind the fence, shard map pointed at the other side, online. The window
// ends with 'plan complete' or at its end time; then the cleanup runs (or,
// when the source serves again, the target copy is dropped).

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

// ErrNotNow is a window request that was not carried out (or not yet): the
// switch did not fit its budget, or the process running the window did not
// answer in time. Nothing is lost; try again (exit 3).
var ErrNotNow = errors.New("not carried out")

// Window actions.
const (
	ActionRevert   = "revert"
	ActionComplete = "complete"
)

// setupWindow adds the window to a plan whose options ask for one: the step
// between cutover and cleanup, and the shard-map changes of each direction.
func setupWindow(p *plans.Plan) {
	if p.Options.ReverseWindowS <= 0 || p.Window != nil {
		return
	}
	w := &plans.Window{DurationS: p.Options.ReverseWindowS, Serving: plans.SideSource, Forward: p.Cutover}
	for _, c := range p.Cutover {
		switch c.Op {
		case shardmap.OpMoveLocation: // move: the location back at the source server
			c.Host, c.Port = p.Source.Host, p.Source.Port
		case shardmap.OpRepoint: // split, merge: the moved range or arc back to the source shard
			c.ShardID = p.Source.ShardID
		case shardmap.OpMergeRange: // merge: the switch's offline changes split the range out again
			continue
		case shardmap.OpRemoveMapping: // hash merge: they add the ring point back (offline, on the target)
			w.Revert = append(w.Revert, shardmap.Change{Op: shardmap.OpRepoint, Ref: c.Ref, ShardID: p.Source.ShardID},
				shardmap.Change{Op: shardmap.OpSetStatus, Ref: c.Ref, Status: shardmap.Online})
			continue
		}
		w.Revert = append(w.Revert, c)
	}
	p.Window = w
	for i, s := range p.Steps {
		if s.Name == plans.StepCleanup {
			p.Steps = append(p.Steps[:i], append([]plans.StepRecord{{Name: plans.StepWindow, State: plans.Pending}}, p.Steps[i:]...)...)
			break
		}
	}
}

// windowPreview is what --dry-run shows of the window.
func windowPreview(p *plans.Plan) []struct {
	step    string
	changes []shardmap.Change
} {
	if p.Window == nil {
		return nil
	}
	return []struct {
		step    string
		changes []shardmap.Change
	}{
		{"plan revert, behind the fence (inside the window)", offChanges(p, plans.SideTarget)},
		{"plan revert, switch to the source", p.Window.Revert},
		{"plan revert again, switch back to the target", p.Window.Forward},
	}
}

// windowCompleteSQL is what 'plan complete' runs besides the cleanup's shard-map statements.
func windowCompleteSQL(p *plans.Plan) []string {
	if p.Window == nil {
		return nil
	}
	return []string{
		"-- plan complete, target serving: the cleanup above (chunked deletes, then DROP DATABASE " + dbutil.QuoteIdent(p.Source.Schema) + " on " + p.Source.Addr() + ")",
		"-- plan complete, source serving (reverted): DROP DATABASE " + dbutil.QuoteIdent(p.Target.Schema) + " on " + p.Target.Addr() + "; the plan ends aborted",
	}
}

// WindowProblems is the preflight check of what the reverse direction needs:
// only move has a window so far, and the target must write a ROW/FULL binlog
// that shardctl's account may read.
func WindowProblems(ctx context.Context, dst *sql.DB, p *plans.Plan) ([]string, error) {
	if p.Window == nil && p.Options.ReverseWindowS <= 0 {
		return nil, nil
	}
	switch p.Operation {
	case "move", "split", "merge":
	default:
		return []string{fmt.Sprintf("--reverse-window is not supported for %s: run it without a window", p.Operation)}, nil
	}
	var problems []string
	var logBin int
	var format, image string
	if err := dst.QueryRowContext(ctx, "SELECT @@global.log_bin, @@global.binlog_format, @@global.binlog_row_image").Scan(&logBin, &format, &image); err != nil {
		return nil, fmt.Errorf("preflight: read binlog settings of the target %s: %w", p.Target.Addr(), err)
	}
	switch {
	case logBin != 1:
		problems = append(problems, fmt.Sprintf("--reverse-window: the target %s has no binary log to tail back: start it with log_bin, binlog_format=ROW and binlog_row_image=FULL", p.Target.Addr()))
	case format != "ROW" || image != "FULL":
		problems = append(problems, fmt.Sprintf("--reverse-window: the target %s logs binlog_format=%s binlog_row_image=%s: set ROW and FULL", p.Target.Addr(), format, image))
	}
	if _, err := binlog.MasterStatus(ctx, dst); err != nil && !errors.Is(err, binlog.ErrBinlogOff) {
		problems = append(problems, fmt.Sprintf("--reverse-window: the account cannot read the target's binlog position (grant REPLICATION CLIENT / BINLOG MONITOR and REPLICATION SLAVE on %s): %v", p.Target.Addr(), err))
	} else if ok, err := canReplicate(ctx, dst); err == nil && !ok {
		problems = append(problems, fmt.Sprintf("--reverse-window: the account may not read the target's binlog: grant REPLICATION SLAVE on %s", p.Target.Addr()))
	}
	return problems, nil
}

// canReplicate reports whether the current account holds REPLICATION SLAVE (or ALL).
func canReplicate(ctx context.Context, db *sql.DB) (bool, error) {
	rows, err := db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		return false, err
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return false, err
		}
		g = strings.ToUpper(g)
		if strings.Contains(g, " ON *.*") && (strings.Contains(g, "ALL PRIVILEGES") || strings.Contains(g, "REPLICATION SLAVE") || strings.Contains(g, "REPLICATION REPLICA")) {
			return true, nil
		}
	}
	return false, rows.Err()
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

// reverted reports a plan whose window ended with the source serving.
func reverted(p *plans.Plan) bool {
	return p.Window != nil && p.Window.Serving == plans.SideSource && p.CutOver()
}

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

func other(side string) string {
	if side == plans.SideSource {
		return plans.SideTarget
	}
	return plans.SideSource
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
	if err := fence.Install(ctx, l.to, l.toEP.Schema, windowFence(r.p, other(l.serving)), wr.lockWait()); err != nil {
		return fmt.Errorf("reverse window: fence the %s copy %s: %w", other(l.serving), l.toEP.Schema, err)
	}
	r.mu.Lock()
	from, gen := w.Tail, wr.gen
	r.mu.Unlock()
	if purged, err := binlog.Purged(ctx, l.from, binlog.Position(from)); err != nil {
		return err
	} else if purged {
		return fmt.Errorf("%w: the %s %s no longer has binlog %s, so the %s copy cannot be kept in sync; complete the window ('shardctl plan complete %s')", ErrPurged, l.serving, l.fromEP.Addr(), from.File, other(l.serving), r.p.ID)
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
		Target: l.to, TargetSchema: l.toEP.Schema, Tables: windowTables(r.p),
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
	if err := fence.Remove(ctx, l.from, l.fromEP.Schema, names(windowFence(r.p, l.serving)), wr.lockWait()); err != nil {
		return fmt.Errorf("reverse window: %w", err)
	}
	return wr.servingOnline(ctx, l.serving)
}

// servingOnline puts the serving side's mappings back online (backChanges),
// whether a switch's offline change was applied or not: one change at a
// time, as a merged range's mapping no longer exists to be set online.
func (wr *windowRun) servingOnline(ctx context.Context, serving string) error {
	r := wr.r
	for _, c := range backChanges(r.p, serving) {
		err := r.env.Store.Apply(ctx, "reverse window: serving side online", []shardmap.Change{c})
		if err != nil && !(c.Op == shardmap.OpSetStatus && errors.Is(err, shardmap.ErrNotFound)) {
			return err
		}
	}
	return nil
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
		req, err := takeRequest(r.env.PlanPath)
		if err != nil {
			r.env.Log.Warn("reverse window: unreadable request ignored", "err", err)
		}
		if req != nil {
			r.env.Log.Info("reverse window: request", "action", req.Action, "id", req.ID)
			switch req.Action {
			case ActionRevert:
				err := wr.revert(ctx)
				r.recordRequest(req, err)
				if err != nil && !errors.Is(err, ErrNotNow) {
					return err
				}
			case ActionComplete:
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

// revert switches to the other side within the blackout budget, with the
// forward cutover's back-off, readiness checks, postpone file and armed
// fence: the serving side's fence triggers are armed ahead of each attempt,
// so fencing inside the blackout is one UPDATE.
func (wr *windowRun) revert(ctx context.Context) error {
	r := wr.r
	budget := r.p.Options.MaxBlackoutMS.D()
	l := r.leg(r.p.Window.Serving)
	ts := windowFence(r.p, l.serving)
	var sessions *fence.Sessions
	last, err := r.attempts(ctx, attemptLoop{
		wait: wr.waitPostpone,
		prepare: func(ctx context.Context) (func(), string, error) {
			// A first raise of the counters, outside the blackout (as the cutover's).
			if err := r.carryCounters(ctx, l.from, l.fromEP.Schema, l.to, l.toEP.Schema, windowTables(r.p), true); err != nil {
				r.env.Log.Warn("reverse window: raising the AUTO_INCREMENT counters ahead of the blackout", "err", err)
			}
			s, why, err := armFence(ctx, l.from, l.fromEP.Schema, ts, budget)
			if s == nil {
				if err != nil {
					err = fmt.Errorf("reverse window: arm the fence on the %s: %w", l.serving, err)
				}
				return nil, why, err
			}
			fault.Hit("during:revert:armed") // tests: crash with the serving side armed, not fenced
			sessions = s
			return s.Close, "", nil
		},
		caughtUp: func(ctx context.Context) (time.Duration, error) { return wr.caughtUp(ctx, 0) },
		longTrx: func(ctx context.Context) (string, error) {
			return longTransaction(ctx, l.from, budget, l.serving)
		},
		other:     "the " + other(l.serving) + " copy",
		try:       func(ctx context.Context, note string) error { return wr.trySwitch(ctx, budget, note, sessions) },
		postponed: "switch postponed: ",
		backedOff: "switch backed off: ",
		blockers: func(ctx context.Context) []plans.Blocker {
			return r.reportBlockers(ctx, l.from, l.fromEP.Schema, names(ts))
		},
		kill: r.killBefore(l.from, l.fromEP.Schema, names(ts)),
	})
	if last == nil && err == nil {
		return nil
	}
	// No attempt went through, or the switch stopped: unless a switch's final
	// position was saved, which a resume finishes behind the fence, no fence
	// holds and the armed triggers go.
	r.mu.Lock()
	held := !r.p.Window.Final.IsZero()
	r.mu.Unlock()
	if !held {
		if rerr := fence.Remove(context.WithoutCancel(ctx), l.from, l.fromEP.Schema, names(ts), wr.lockWait()); rerr != nil {
			r.env.Log.Warn("reverse window: removing the armed fence triggers", "side", l.serving, "err", rerr)
		}
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: no switch fitted the %s blackout budget in %d attempts (last: %v); the %s keeps serving and the window goes on",
		ErrNotNow, budget, r.p.Options.FenceAttempts, last, l.serving)
}

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

// trySwitch is one switch attempt within the budget; sessions hold the
// serving side's armed fence (revert's prepare).
func (wr *windowRun) trySwitch(ctx context.Context, budget time.Duration, note string, sessions *fence.Sessions) error {
	r, w := wr.r, wr.r.p.Window
	l := r.leg(w.Serving)
	idx, start, phase, left := r.startAttempt("switching to the "+other(l.serving)+note, budget)
	undo := func(reason error) error {
		bg := context.WithoutCancel(ctx)
		// Forget the switch before the serving side is writable again: a
		// resume must not finish a switch whose fence was lifted.
		r.mu.Lock()
		w.Final, w.Next = plans.Position{}, plans.Position{}
		r.mu.Unlock()
		err := r.save(true)
		if ferr := fence.Remove(bg, l.from, l.fromEP.Schema, names(windowFence(r.p, l.serving)), wr.lockWait()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		// The offline change may not have gone in (it ran beside the fence).
		if aerr := wr.servingOnline(bg, l.serving); aerr != nil {
			err = errors.Join(err, aerr)
		}
		r.mu.Lock()
		r.p.Attempts[idx].Result = "switch backed off: " + reason.Error()
		r.p.Attempts[idx].BlackoutM = msSince(start)
		r.mu.Unlock()
		_ = r.save(true)
		if err != nil {
			return fmt.Errorf("%v; and undoing the attempt failed: %w", reason, err)
		}
		return fmt.Errorf("%w: %v", errBackedOff, reason)
	}
	offline := func(ctx context.Context) error {
		return r.env.Store.Apply(ctx, "reverse window: take the mappings offline", offChanges(r.p, l.serving))
	}
	fenceRow := func() error { return sessions.Fence(ctx, l.fromEP.Schema, left()) }
	if err := offlineAndFence(ctx, offline, fenceRow, phase, undo, l.serving); err != nil {
		return err
	}
	final, err := binlog.MasterStatus(ctx, l.from)
	if err != nil {
		return undo(err)
	}
	r.mu.Lock()
	w.Final = plans.Position(final)
	r.mu.Unlock()
	if err := r.save(true); err != nil {
		return undo(err)
	}
	fault.Hit("during:revert")
	if err := finalCatchup(ctx, wr.tail, final, left()); err != nil {
		return undo(err)
	}
	phase("final")
	if time.Since(start) > budget {
		return undo(fmt.Errorf("the attempt took %s, over the %s budget", time.Since(start).Round(time.Millisecond), budget))
	}
	return wr.finishSwitch(ctx, start, idx)
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
	if err := r.carryCounters(ctx, l.from, l.fromEP.Schema, l.to, l.toEP.Schema, windowTables(r.p), false); err != nil {
		return fmt.Errorf("reverse window: %w", err)
	}
	if w.Next.IsZero() {
		next, err := binlog.MasterStatus(ctx, l.to)
		if err != nil {
			return fmt.Errorf("reverse window: read the %s's binlog position: %w", other(l.serving), err)
		}
		r.mu.Lock()
		w.Next = plans.Position(next)
		r.mu.Unlock()
	}
	if err := r.save(true); err != nil {
		return err
	}
	lift := time.Now()
	if err := fence.Remove(ctx, l.to, l.toEP.Schema, names(windowFence(r.p, other(l.serving))), wr.lockWait()); err != nil {
		return fmt.Errorf("reverse window: lift the fence on the %s: %w", other(l.serving), err)
	}
	changes := w.Revert
	if l.serving == plans.SideSource {
		changes = w.Forward
	}
	cut := time.Now()
	if err := r.env.Store.Apply(ctx, "reverse window: switch to the "+other(l.serving), changes); err != nil {
		return err
	}
	r.mu.Lock()
	wr.gen++
	w.Serving, w.Tail, w.Final, w.Next = other(l.serving), w.Next, plans.Position{}, plans.Position{}
	sw := plans.Switch{At: time.Now().UTC(), To: w.Serving}
	if idx >= 0 {
		a := &r.p.Attempts[idx]
		a.Phases["lift"] = float64(cut.Sub(lift).Microseconds()) / 1000 // the other side's fence lifted
		// The rest since the last phase: the plan saved, the other side's
		// position read (as the cutover's handoff).
		a.Phases["handoff"] = max(0, float64(cut.Sub(start).Microseconds())/1000-sumPhases(a.Phases))
		a.Phases["cutover"] = msSince(cut)
		a.BlackoutM = msSince(start)
		a.Result = "switched to the " + w.Serving + strings.TrimPrefix(a.Result, "switching to the "+w.Serving) // keeps readiness's note
		sw.BlackoutMS = a.BlackoutM
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

// offChanges take the moved rows offline on the serving side, derived from
// the cutover's changes (the plan's own offline changes may add mappings,
// as a hash split's ring point: not again). With the target serving, a
// merged range is first split out of the target's mapping again, and a
// merged ring point added back, pointing at the target.
func offChanges(p *plans.Plan, serving string) []shardmap.Change {
	var pre, off []shardmap.Change
	for _, c := range p.Cutover {
		switch {
		case c.Op == shardmap.OpSetStatus && c.Status == shardmap.Online:
			off = append(off, shardmap.Change{Op: shardmap.OpSetStatus, Ref: c.Ref, Status: shardmap.Offline})
		case c.Op == shardmap.OpMergeRange && serving == plans.SideTarget:
			pre = append(pre, shardmap.Change{Op: shardmap.OpSplitRange, Ref: shardmap.Ref{FuncID: c.Ref.FuncID}, At: c.Ref.Lower})
		case c.Op == shardmap.OpRemoveMapping && serving == plans.SideTarget:
			pre = append(pre, shardmap.Change{Op: shardmap.OpAddHashPoint, Ref: c.Ref, ShardID: p.Target.ShardID, Status: shardmap.Offline})
		case c.Op == shardmap.OpRemoveMapping:
			off = append(off, shardmap.Change{Op: shardmap.OpSetStatus, Ref: c.Ref, Status: shardmap.Offline})
		}
	}
	return append(pre, off...)
}

// backChanges undo offChanges: mappings online again, and with the target
// serving, the range merged (or the ring point removed) again.
func backChanges(p *plans.Plan, serving string) []shardmap.Change {
	back := onlineAgain(offChanges(p, serving))
	if serving == plans.SideTarget {
		for _, c := range p.Cutover {
			if c.Op == shardmap.OpMergeRange || c.Op == shardmap.OpRemoveMapping {
				back = append(back, c)
			}
		}
	}
	return back
}

// windowFence is what a side's fence covers: on the source the plan's
// fence; on the target of a merge only the merged range (the target's own
// keys stay writable); on any other target the same tables and rows.
func windowFence(p *plans.Plan, side string) []fence.Table {
	if side == plans.SideTarget && p.Operation == "merge" {
		var out []fence.Table
		for _, t := range p.Copy {
			out = append(out, fence.Table{Name: t.Name, Filter: t.Filter})
		}
		return out
	}
	return fenceTables(p)
}

func names(ts []fence.Table) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// windowTables are the tables the window's tail keeps in sync: a move's
// whole schema; a split's sharded tables, filtered to the moved range (the
// global tables are the source's own, and each shard has its copy).
func windowTables(p *plans.Plan) []tables.Table {
	if p.Operation == "move" {
		return p.Copy
	}
	var out []tables.Table
	for _, t := range p.Copy {
		if t.Sharded {
			out = append(out, t)
		}
	}
	return out
}

// swapWindowTriggers readies both copies for a window tail along l: the copy
// that does not serve receives the tail's writes, which must not fire its
// triggers (the serving side's binlog already carries what they wrote), so its
// triggers are guarded (the tail's session passes them); the serving side's
// are put back exact, since a switch may have swapped the roles. Guarded
// triggers behave the same for the application, so the order is free and a
// crash between the two is harmless; both are idempotent.
func (r *runner) swapWindowTriggers(ctx context.Context, l leg) error {
	ts := windowTables(r.p)
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
		return fmt.Errorf("reverse window: guard the triggers of the %s copy: %w", other(l.serving), err)
	}
	return nil
}

// dropTargetCopy is the cleanup of a window that ended with the source
// serving: the target copy goes, once the shard map is seen pointing at the source.
func (r *runner) dropTargetCopy(ctx context.Context) error {
	m, err := r.env.Store.Load(ctx)
	if err != nil {
		return err
	}
	if err := routesToSource(m, r.p); err != nil {
		return fmt.Errorf("refusing to remove the target copy %s on %s: %w", r.p.Target.Schema, r.p.Target.Addr(), err)
	}
	// The plan's abort changes undo what the operation added to the shard
	// map (a split's mapping split and new location); a move's only set online.
	if err := r.env.Store.Apply(ctx, "reverse window: undo the shard-map changes of "+r.p.ID, r.p.Abort); err != nil {
		return err
	}
	if err := fence.Remove(ctx, r.src, r.p.Source.Schema, fenceNames(r.p), r.p.Options.LockWaitMS.D()); err != nil {
		return err
	}
	if err := r.undoTargetCopy(ctx, "reverse window", nil); err != nil {
		return err
	}
	if !r.p.DropTargetSchema {
		// merge: the target is a live shard (only the merged range's rows went).
		lockWait := r.p.Options.LockWaitMS.D()
		// The target keeps living: its triggers, guarded while it did not
		// serve, get their exact definitions back.
		trig, err := triggersOn(ctx, r.dst, r.p.Target.Schema, windowTables(r.p))
		if err != nil {
			return err
		}
		if err := schemaobj.Replace(ctx, r.dst, r.p.Target.Schema, r.p.Target.Schema, trig, false); err != nil {
			return fmt.Errorf("reverse window: restore the target's triggers: %w", err)
		}
		return fence.Remove(ctx, r.dst, r.p.Target.Schema, names(windowFence(r.p, plans.SideTarget)), lockWait)
	}
	return nil
}

// routesToSource checks that the shard map sends the moved rows to the
// source: the location back at the source server (move), the moved range or
// ring point at the source shard (split, merge).
func routesToSource(m *shardmap.Map, p *plans.Plan) error {
	for _, c := range p.Window.Revert {
		switch c.Op {
		case shardmap.OpMoveLocation:
			loc, err := m.Location(p.Source.ShardID)
			if err != nil {
				return err
			}
			if loc.Host != p.Source.Host || loc.Port != p.Source.Port {
				return fmt.Errorf("the shard map points shard %d at %s, not at the source %s", loc.ShardID, loc.Addr(), p.Source.Addr())
			}
		case shardmap.OpRepoint:
			ok := false
			for _, mp := range m.ShardMappings(p.Source.ShardID) {
				r := mp.Ref()
				ok = ok || r.FuncID == c.Ref.FuncID && r.Kind == c.Ref.Kind && r.Hash == c.Ref.Hash &&
					(r.Lower == nil) == (c.Ref.Lower == nil) && (r.Lower == nil || r.Lower.Compare(*c.Ref.Lower) == 0)
			}
			if !ok {
				return fmt.Errorf("the moved mapping does not point at shard %d", p.Source.ShardID)
			}
		}
	}
	return nil
}

// requestFile is a 'plan revert' or 'plan complete' waiting for the process running the window.
type requestFile struct {
	ID     string `json:"id"`
	Action string `json:"action"`
}

// RequestPath is where requests to the process running plan file path wait.
func RequestPath(planPath string) string { return planPath + ".request" }

// takeRequest claims a pending request (renaming it first, so a requester
// that gives up can tell whether it was taken).
func takeRequest(planPath string) (*requestFile, error) {
	if planPath == "" {
		return nil, nil
	}
	taken := RequestPath(planPath) + ".taken"
	if err := os.Rename(RequestPath(planPath), taken); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer os.Remove(taken)
	b, err := os.ReadFile(taken)
	if err != nil {
		return nil, err
	}
	var q requestFile
	if err := json.Unmarshal(b, &q); err != nil {
		return nil, fmt.Errorf("request file %s: %w", taken, err)
	}
	return &q, nil
}

func (r *runner) recordRequest(q *requestFile, err error) {
	rec := plans.Request{ID: q.ID, Action: q.Action, At: time.Now().UTC()}
	if err != nil {
		rec.Error = err.Error()
	}
	r.mu.Lock()
	w := r.p.Window
	w.Requests = append(w.Requests, rec)
	if n := len(w.Requests); n > 10 {
		w.Requests = w.Requests[n-10:]
	}
	r.mu.Unlock()
	_ = r.save(true)
}

// RequestWindow asks for a revert or a complete of plan file path. The
// process running the window carries it out and the call waits (at most
// wait); with no process running the plan, the call does it itself (a
// revert leaves the plan stopped inside its window: 'plan resume' keeps the
// tail going; a complete runs the cleanup to the end).
func RequestWindow(ctx context.Context, env Env, path, action string, wait time.Duration) (*plans.Plan, error) {
	if env.Log == nil {
		env.Log = discard
	}
	if env.Observer == nil {
		env.Observer = NopObserver{}
	}
	env.PlanPath = path
	p, err := plans.Load(path)
	if err != nil {
		return nil, err
	}
	if !p.InWindow() {
		why := "it has no reverse window (made without --reverse-window)"
		switch {
		case p.Window == nil:
		case !p.CutOver():
			why = "it has not cut over yet (to undo it before cutover: 'shardctl plan abort')"
		default:
			why = fmt.Sprintf("its window has ended (%s; state %s)", p.Window.EndReason, p.State)
		}
		return p, fmt.Errorf("%w: plan %s cannot %s: %s", ErrRefused, p.ID, action, why)
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	q := requestFile{ID: hex.EncodeToString(nonce[:]), Action: action}
	b, _ := json.Marshal(q)
	tmp := fmt.Sprintf("%s.%s.tmp", RequestPath(path), q.ID)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return p, fmt.Errorf("write request: %w", err)
	}
	err = os.Link(tmp, RequestPath(path))
	os.Remove(tmp)
	if errors.Is(err, os.ErrExist) {
		// Busy, not resumable: the other request is being carried out (exit 4).
		return p, fmt.Errorf("%w: another request is waiting for plan %s (%s); wait for it, or remove that file if no process runs the plan", lock.ErrBusy, p.ID, RequestPath(path))
	} else if err != nil {
		return p, fmt.Errorf("write request: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		cur, err := plans.Load(path)
		if err != nil {
			return p, err
		}
		p = cur
		if rec := findRequest(p, q.ID); rec != nil {
			if rec.Error != "" {
				return p, fmt.Errorf("%w: %s", ErrNotNow, rec.Error)
			}
			if action == ActionComplete {
				return p, waitEnded(ctx, env, path, p, deadline)
			}
			return p, nil
		}
		free, err := lockFree(ctx, env, p)
		if err != nil {
			return p, err
		}
		if free {
			if _, err := os.Stat(RequestPath(path)); err != nil {
				return p, fmt.Errorf("%w: the process running plan %s took the request and stopped before finishing it; 'shardctl plan resume %s' finishes any switch it began", ErrNotNow, p.ID, p.ID)
			}
			done, p2, err := runRequest(ctx, env, path)
			if done {
				return p2, err
			}
		}
		if time.Now().After(deadline) {
			if os.Remove(RequestPath(path)) == nil {
				return p, fmt.Errorf("%w: the process running plan %s did not take the request within %s; nothing was changed", ErrNotNow, p.ID, wait)
			}
			return p, fmt.Errorf("%w: the process running plan %s took the request but did not finish it within %s; see 'shardctl plan show %s'", ErrNotNow, p.ID, wait, p.ID)
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func findRequest(p *plans.Plan, id string) *plans.Request {
	if p.Window == nil {
		return nil
	}
	for i := range p.Window.Requests {
		if p.Window.Requests[i].ID == id {
			return &p.Window.Requests[i]
		}
	}
	return nil
}

// waitEnded waits until a completing plan's process has finished the cleanup.
func waitEnded(ctx context.Context, env Env, path string, p *plans.Plan, deadline time.Time) error {
	for p.State == plans.StateRunning {
		if free, err := lockFree(ctx, env, p); err != nil {
			return err
		} else if free {
			if cur, err := plans.Load(path); err == nil && cur.State != plans.StateRunning {
				*p = *cur
				break
			}
			return fmt.Errorf("%w: the process running plan %s stopped before its cleanup finished; 'shardctl plan resume %s' finishes it", ErrNotNow, p.ID, p.ID)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the window of plan %s ended; its cleanup is still running (see 'shardctl plan show %s')", ErrNotNow, p.ID, p.ID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		cur, err := plans.Load(path)
		if err != nil {
			return err
		}
		*p = *cur
	}
	if p.State == plans.StateStopped {
		return fmt.Errorf("%w: the cleanup of plan %s stopped; see 'shardctl plan show %s' and resume it", ErrNotNow, p.ID, p.ID)
	}
	return nil
}

// lockFree reports that no process holds the plan's locks.
func lockFree(ctx context.Context, env Env, p *plans.Plan) (bool, error) {
	for _, n := range p.Locks {
		var id sql.NullInt64
		if err := env.Store.DB.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", n).Scan(&id); err != nil {
			return false, fmt.Errorf("check lock %s: %w", n, err)
		}
		if id.Valid {
			return false, nil
		}
	}
	return true, nil
}

// runRequest carries out the pending request itself when no process runs
// the plan. done is false when another process took the lock meanwhile.
func runRequest(ctx context.Context, env Env, path string) (done bool, _ *plans.Plan, _ error) {
	p, err := plans.Load(path)
	if err != nil {
		return true, nil, err
	}
	lk, err := lock.Acquire(ctx, env.Store.DB, env.Store.Schema, p.Locks, lock.Holder(p.ID+" (window request)"))
	if errors.Is(err, lock.ErrBusy) {
		return false, p, nil
	} else if err != nil {
		return true, p, err
	}
	q, err := takeRequest(path)
	if err != nil || q == nil {
		lk.Release()
		return err != nil, p, err
	}
	r := &runner{env: env, p: p}
	if q.Action == ActionComplete {
		r.recordRequest(q, nil)
		p.Window.Completing = true
		_ = r.save(true)
		lk.Release()
		return true, p, Run(ctx, env, p)
	}
	defer lk.Release()
	defer r.close()
	if err := r.open(ctx); err != nil {
		return true, p, err
	}
	wr := &windowRun{r: r}
	defer func() { _ = wr.stopTail() }()
	err = wr.restore(ctx)
	if err == nil {
		err = wr.revert(ctx)
	}
	r.recordRequest(q, err)
	if err := wr.stopTail(); err != nil {
		env.Log.Warn("reverse window: stopping the tail", "err", err)
	}
	r.mu.Lock()
	p.State = plans.StateStopped // inside its window: 'plan resume' keeps the tail going
	r.mu.Unlock()
	_ = r.save(true)
	return true, p, err
}
