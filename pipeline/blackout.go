package pipeline

// The blackout, in one place: one attempt loop with two directions.
//
//	forward (the fence step, cutover.go): the source is fenced and its
//	        mappings go offline; the target catches up; the cutover step
//	        switches the shard map.
//	reverse (the window's switch, window_run_switch.go): the serving side is
//	        fenced and its mappings go offline; the other side catches up;
//	        finishSwitch points the shard map at it.
//
// Both run runner.runBlackout: wait while postponed, check readiness (lag,
// long transactions), arm the fence, then per attempt: mappings offline
// beside the fence row -> final position -> final catch-up -> the
// direction's recheck; an attempt that overruns the budget is lifted
// (lift: fence removed, mappings online, the recorded end forgotten) and the
// next follows after a doubling back-off. A blackout value says what differs.
// The loop holds these rules; the work each step does on the servers, the
// shard map and the plan file is behind blackoutWork, so the rules are
// tested without a server (blackout_test.go).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/plans"
)

// blackout is one direction of the blackout: which side is fenced and with
// what, which shard-map changes take its rows offline and put them back,
// where the final position is recorded, and what ends a good attempt.
type blackout struct {
	label  string  // prefix of log lines and errors: "" or "reverse window: "
	side   string  // the fenced side (source or target), for messages
	other  string  // the side that catches up, for readiness's messages
	db     *sql.DB // the fenced side's server
	schema string  // and schema
	fence  []fence.Table
	arm    []fence.Table // what is armed; fence unless a crash test arms half

	trying, postponed, backedOff string // attempt results' prefixes

	wait     func(ctx context.Context) error                  // holds while postponed
	counters func(ctx context.Context) error                  // the raise of AUTO_INCREMENT counters, outside the blackout
	caughtUp func(ctx context.Context) (time.Duration, error) // how long the other side takes to reach a fresh position
	tail     func() *binlog.Tailer                            // the tail that applies the fenced side's changes
	offline  func(ctx context.Context) error                  // the fenced side's mappings offline
	online   func(ctx context.Context) error                  // and back online (lift)
	// mark records (held) or forgets (!held) an attempt's final position,
	// which a resume finishes behind the fence; called with r.mu held.
	mark      func(final binlog.Position, held bool)
	held      func() bool // called with r.mu held: a final position is recorded
	saveFirst bool        // the final position is saved before the final catch-up, not alongside it
	// recheck, optional, runs behind the fence after the final catch-up;
	// ran says it did (a phase of its own); an ErrMismatch stops the step.
	recheck func(ctx context.Context, d time.Duration) (ran bool, err error)
	// done, optional, finishes a good attempt within the step (the
	// window's switch); without it the next step does (the cutover).
	done func(ctx context.Context, start time.Time, idx int) error

	faultArmed, faultFenced, faultFinal string // crash tests' points ("" none)
}

// runBlackout runs up to FenceAttempts attempts of direction b. It returns
// nil, nil when an attempt went through; the last reason (non-nil) when none
// fitted; or the error that stopped it. Unless a final position is held
// (a resume finishes behind the fence), no fence is left armed.
func (r *runner) runBlackout(ctx context.Context, b *blackout) (last error, err error) {
	return r.blackoutLoop(ctx, b, &liveWork{r: r, b: b})
}

// blackoutWork is the work of a blackout's attempts, on the servers, the
// shard map and the plan file. The attempt loop (blackoutLoop, attempts,
// attempt, lift) holds the rules around it: how many attempts, the
// back-off between them, postponement, the budget, what a failed attempt
// undoes and in which order. liveWork does the work; the tests' recorder
// (blackout_test.go) records the calls and answers as scripted, so the
// rules are tested without a server.
type blackoutWork interface {
	pause(ctx context.Context, d time.Duration) error // the back-off between attempts
	killBlockers(ctx context.Context)                 // --kill-blockers, before a later attempt
	wait(ctx context.Context) error                   // holds while postponed
	longTransaction(ctx context.Context, budget time.Duration) (why string, err error)
	counters(ctx context.Context) error           // the first raise of AUTO_INCREMENT counters, outside the blackout
	blockers(ctx context.Context) []plans.Blocker // the sessions holding the fenced tables
	// arm arms the fence ahead of readiness; why is set when arming gave
	// up within the budget (nothing is armed then). disarm closes what
	// arm opened, after the attempt.
	arm(ctx context.Context, budget time.Duration) (why string, err error)
	disarm()
	caughtUp(ctx context.Context) (time.Duration, error) // how long the other side takes to reach a fresh position
	offline(ctx context.Context) error                   // the fenced side's mappings offline
	fence(ctx context.Context, left time.Duration) error // the fence row: no write goes through
	finalPosition(ctx context.Context) (binlog.Position, error)
	mark(final binlog.Position, held bool) // see blackout.mark; called with r.mu held
	held() bool                            // see blackout.held; called with r.mu held
	save() error                           // the plan, with what mark recorded
	finalCatchup(ctx context.Context, final binlog.Position, d time.Duration) error
	recheck(ctx context.Context, d time.Duration) (ran bool, err error)
	done(ctx context.Context, start time.Time, idx int) error
	removeFence(ctx context.Context) error // the fence, armed or set
	online(ctx context.Context) error      // the fenced side's mappings back online
}

// blackoutLoop is runBlackout with the work w.
func (r *runner) blackoutLoop(ctx context.Context, b *blackout, w blackoutWork) (last error, err error) {
	budget := r.p.Options.MaxBlackoutMS.D()
	last, err = r.attempts(ctx, b, w, budget)
	if last == nil && err == nil {
		return nil, nil
	}
	r.mu.Lock()
	held := w.held()
	r.mu.Unlock()
	if !held {
		if rerr := w.removeFence(context.WithoutCancel(ctx)); rerr != nil {
			r.env.Log.Warn(b.label+"removing the armed fence triggers", "side", b.side, "err", rerr)
		}
	}
	return last, err
}

// attempts is the loop: a doubling back-off between attempts, the
// postponement waited out and readiness checked before each, the fence
// armed ahead of readiness so the attempt follows a good reading at once
// and fencing is one UPDATE (fence/armed.go).
func (r *runner) attempts(ctx context.Context, b *blackout, w blackoutWork, budget time.Duration) (last error, err error) {
	backoff := max(r.p.Options.BackoffMS, 1).D()
	postponed := 0
	for i := 0; i < max(1, r.p.Options.FenceAttempts); i++ {
		if i > 0 {
			if err := w.pause(ctx, backoff); err != nil {
				return nil, err
			}
			backoff = min(2*backoff, 30*time.Second)
			w.killBlockers(ctx)
		}
		if err := w.wait(ctx); err != nil {
			return nil, err
		}
		// InnoDB cannot tell which tables an idle transaction touched: a long
		// transaction postpones at most three attempts in a row, then the fence
		// itself finds out (arming it waits for metadata locks within the budget).
		why, err := w.longTransaction(ctx, budget)
		if err != nil {
			return nil, err
		}
		if why != "" {
			if postponed++; postponed <= 3 {
				r.recordAttempt(plans.Attempt{Started: time.Now().UTC(), Result: b.postponed + why, Blockers: w.blockers(ctx)})
				last = errors.New(why)
				continue
			}
		}
		// The raise of the counters, outside the blackout: behind the fence
		// only ids lost since then still need an ALTER. Best effort (the
		// carry behind the fence reads both sides again), but a merge whose
		// ids have met stops.
		if err := w.counters(ctx); errors.Is(err, errIdsMet) {
			return nil, err
		} else if err != nil {
			r.env.Log.Warn(b.label+"raising the AUTO_INCREMENT counters ahead of the blackout", "err", err)
		}
		why, err = w.arm(ctx, budget)
		if err != nil {
			return nil, fmt.Errorf("%sarm the fence on the %s: %w", b.label, b.side, err)
		}
		if why != "" {
			// Arming the fence gave up within the budget: an attempt that
			// backed off, though nothing was offline.
			postponed = 0
			r.recordAttempt(plans.Attempt{Started: time.Now().UTC(), Result: b.backedOff + why, Blockers: w.blockers(ctx)})
			last = errors.New(why)
			continue
		}
		fault.Hit(b.faultArmed)
		why, note, err := r.ready(ctx, b, w, budget)
		if err != nil {
			w.disarm()
			return nil, err
		}
		if why != "" {
			w.disarm()
			r.recordAttempt(plans.Attempt{Started: time.Now().UTC(), Result: b.postponed + why})
			last = errors.New(why)
			continue
		}
		postponed = 0
		err = r.attempt(ctx, b, w, budget, note)
		w.disarm()
		if err == nil {
			return nil, nil
		}
		if !errors.Is(err, errBackedOff) {
			return nil, err
		}
		last = err
	}
	return last, nil
}

// attempt is one attempt within the budget, the fence armed; note (how
// readiness ended) goes into the attempt's result.
func (r *runner) attempt(ctx context.Context, b *blackout, w blackoutWork, budget time.Duration, note string) error {
	idx, start, phase, left := r.startAttempt(b.trying+note, budget)
	var final binlog.Position
	var ended chan error // the saving of the final position
	undo := func(reason error) error { return r.lift(ctx, b, w, idx, start, final, &ended, reason) }
	fenceRow := func() error { return w.fence(ctx, left()) }
	if err := offlineAndFence(ctx, w.offline, fenceRow, phase, undo, b.side); err != nil {
		return err
	}
	fault.Hit(b.faultFenced)
	final, err := w.finalPosition(ctx)
	if err != nil {
		return undo(err)
	}
	// The final position is recorded before the other side catches up: a
	// crash from then on resumes behind the fence still in place; an
	// attempt that backs off forgets it again before lifting the fence.
	r.mu.Lock()
	w.mark(final, true)
	r.mu.Unlock()
	ended = make(chan error, 1)
	if b.saveFirst {
		err := w.save()
		ended <- err
		if err != nil {
			return undo(err)
		}
	} else {
		go func() { ended <- w.save() }()
	}
	fault.Hit(b.faultFinal)
	if err := w.finalCatchup(ctx, final, left()); err != nil {
		return undo(err)
	}
	phase("final")
	// The recheck gets what is left of the budget, less what lifting the
	// fence takes, so an attempt that finds a difference (or whose recheck
	// is slow) is undone within --max-blackout, not after it.
	ran, err := w.recheck(ctx, max(left()-liftReserve(budget), time.Millisecond))
	if ran {
		phase("recheck") // also when it failed: the lift's own time is what follows
	}
	if errors.Is(err, ErrMismatch) {
		if uerr := undo(err); !errors.Is(uerr, errBackedOff) {
			return uerr
		}
		return err
	}
	if err != nil {
		return undo(err)
	}
	if err := <-ended; err != nil {
		ended = nil // not saved: the plan on disk has no final position
		return undo(err)
	}
	ended <- nil // for undo below
	if time.Since(start) > budget {
		return undo(fmt.Errorf("the attempt took %s, over the %s budget", time.Since(start).Round(time.Millisecond), budget))
	}
	return w.done(ctx, start, idx)
}

// liftReserve is the part of the budget a recheck leaves for lifting the
// fence after it: the plan saved with the final position forgotten, the
// fence row removed and the mappings put back online (a few statements and
// a save of O(moving keys); tens of milliseconds here).
func liftReserve(budget time.Duration) time.Duration { return min(budget/10, 100*time.Millisecond) }

// lift undoes attempt idx: the final position is forgotten (and, if it
// was saved, saved forgotten) before the fence is lifted, as a resume must
// not finish behind a fence that is gone; then the fence goes and the
// fenced side's mappings are online again, whether the offline change went
// in or not. The attempt's record names the blockers of a lock wait.
func (r *runner) lift(ctx context.Context, b *blackout, w blackoutWork, idx int, start time.Time, final binlog.Position, ended *chan error, reason error) error {
	r.mu.Lock()
	w.mark(binlog.Position{}, false)
	r.mu.Unlock()
	if *ended != nil {
		if err := <-*ended; err == nil {
			if err := w.save(); err != nil {
				// The plan on disk holds the final position: keep the fence
				// (and what the loop's end reads) so a resume finishes behind it.
				r.mu.Lock()
				w.mark(final, true)
				r.mu.Unlock()
				return fmt.Errorf("%v; and the plan could not be saved, so the fence stays (resume finishes the switch): %w", reason, err)
			}
		}
		*ended = nil
	}
	bg := context.WithoutCancel(ctx)
	err := w.removeFence(bg)
	if oerr := w.online(bg); oerr != nil {
		err = errors.Join(err, oerr)
	}
	took := msSince(start)
	var held []plans.Blocker
	if isFenceTimeout(reason) { // named after the fence is lifted: not part of the blackout
		held = w.blockers(bg)
	}
	r.mu.Lock()
	r.p.Attempts[idx].Result = b.backedOff + reason.Error()
	if err != nil {
		// The fence may still hold: the attempt stays open, as a killed
		// run's would, so the retries hurry (inBlackout), the run's last
		// word says so (stillFenced), and a resume lifts or re-arms it.
		r.p.Attempts[idx].Result = b.trying + " (undoing it failed: " + err.Error() + ")"
	}
	r.p.Attempts[idx].BlackoutM = took
	r.p.Attempts[idx].Blockers = held
	r.mu.Unlock()
	r.logBlackout(b.label, idx)
	r.noteAttempt(idx)
	_ = w.save()
	if err != nil {
		return fmt.Errorf("%v; and undoing the attempt failed: %w", reason, err)
	}
	return fmt.Errorf("%w: %v", errBackedOff, reason)
}

// closeAttempt ends attempt a's blackout at cut, the commit that pointed
// the shard map at the other side: the time from its last phase to the
// switch is the handoff, the switch itself the cutover, and its result
// becomes result (what followed trying, readiness's note, is kept). Called
// with r.mu held; returns the blackout in ms.
func closeAttempt(a *plans.Attempt, cut time.Time, trying, result string) float64 {
	if a.Phases != nil {
		a.Phases["handoff"] = max(0, float64(cut.Sub(a.Started).Microseconds())/1000-sumPhases(a.Phases))
		a.Phases["cutover"] = msSince(cut)
	}
	a.BlackoutM = msSince(a.Started)
	a.Result = result + strings.TrimPrefix(a.Result, trying)
	return a.BlackoutM
}

// logBlackout logs attempt idx's blackout and where it went, phase by
// phase, in the order they ran: what a slow cutover is diagnosed from.
func (r *runner) logBlackout(label string, idx int) {
	r.mu.Lock()
	a := r.p.Attempts[idx]
	args := []any{"attempt", idx + 1, "blackout_ms", a.BlackoutM}
	for _, name := range phaseOrder {
		if v, ok := a.Phases[name]; ok {
			args = append(args, name+"_ms", v)
		}
	}
	r.mu.Unlock()
	r.env.Log.Info(label+"blackout", args...)
}

// phaseOrder is the order an attempt's phases run in.
var phaseOrder = []string{"fence", "offline", "final", "recheck", "counters", "lift", "handoff", "cutover"}

// sumPhases adds up an attempt's phases (each the time since the previous one).
func sumPhases(ps map[string]float64) float64 {
	var t float64
	for _, v := range ps {
		t += v
	}
	return t
}

// ready re-checks, without burning an attempt, until the other side reaches
// a fresh position quickly enough to fence (readiness). why is set when it
// never did within the patience and not even under the old half-budget rule
// (the attempt is postponed); note says when the old rule let it through.
func (r *runner) ready(ctx context.Context, b *blackout, w blackoutWork, budget time.Duration) (why, note string, err error) {
	start := time.Now()
	for {
		took, err := w.caughtUp(ctx)
		if err != nil {
			return "", "", err
		}
		switch v := readiness(took, budget, time.Since(start)); v {
		case fenceNow:
			return "", "", nil
		case fenceRelaxed:
			return "", fmt.Sprintf(" (readiness: %s did not reach a fresh position within %s for %s; fenced at %s, under half the budget)",
				b.other, freshBound(budget), time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond)), nil
		case notReady:
			return fmt.Sprintf("%s needed %s to catch up, over half the %s budget", b.other, took.Round(time.Millisecond), budget), "", nil
		}
		if err := ctx.Err(); err != nil {
			return "", "", err
		}
	}
}

// verdict is readiness's answer.
type verdict int

const (
	fenceNow     verdict = iota // the other side is close: fence
	recheck                     // not close enough yet: measure again at once
	fenceRelaxed                // never close enough within the patience, but under the old rule (half the budget): fence
	notReady                    // too far behind even for the old rule: postpone the attempt
)

// readiness decides whether to fence, from how long the other side took to
// reach a fresh source position (the final catch-up behind the fence takes
// about as long) and how long readiness has been re-checking. The catch-up
// should be a small part of the budget; a tail that never gets that close
// still cuts over after a while, under the old rule.
func readiness(took, budget, waited time.Duration) verdict {
	switch {
	case took <= freshBound(budget):
		return fenceNow
	case waited < patience(budget):
		return recheck
	case took <= budget/2:
		return fenceRelaxed
	default:
		return notReady
	}
}

// freshBound is how quickly the other side must reach a fresh position to fence.
func freshBound(budget time.Duration) time.Duration { return min(budget/10, 30*time.Millisecond) }

// patience is how long readiness re-checks before it falls back to the old rule.
func patience(budget time.Duration) time.Duration {
	return min(max(2*budget, 2*time.Second), 10*time.Second)
}

var errBackedOff = errors.New("backed off")

func (r *runner) recordAttempt(a plans.Attempt) int {
	idx := r.noteNewAttempt(a)
	_ = r.save(true) // every attempt is on record, for 'plan show'
	return idx
}

// noteNewAttempt adds attempt a to the plan (not saved yet) and tells the observer.
func (r *runner) noteNewAttempt(a plans.Attempt) int {
	r.mu.Lock()
	r.p.Attempts = append(r.p.Attempts, a)
	idx := len(r.p.Attempts) - 1
	r.mu.Unlock()
	r.env.Log.Info("cutover attempt", "attempt", idx+1, "result", a.Result)
	r.noteAttempt(idx)
	return idx
}

// noteAttempt tells an AttemptObserver about attempt idx.
func (r *runner) noteAttempt(idx int) {
	ao, ok := r.env.Observer.(AttemptObserver)
	if !ok {
		return
	}
	r.mu.Lock()
	a := r.p.Attempts[idx]
	a.Phases = nil // the observer gets a copy; the map stays the runner's
	a.Blockers = slices.Clone(a.Blockers)
	r.mu.Unlock()
	ao.Attempt(idx+1, a)
}

// longTransaction names a transaction older than budget that holds locks on db, or "".
func longTransaction(ctx context.Context, db *sql.DB, budget time.Duration, side string) (string, error) {
	var id, thread, age int64
	err := db.QueryRowContext(ctx, `SELECT trx_id, trx_mysql_thread_id, TIMESTAMPDIFF(MICROSECOND, trx_started, NOW(6)) FROM information_schema.INNODB_TRX
		WHERE trx_started < NOW(6) - INTERVAL ? MICROSECOND AND (trx_rows_modified > 0 OR trx_tables_locked > 0 OR trx_lock_structs > 0)
		ORDER BY trx_started LIMIT 1`, budget.Microseconds()).Scan(&id, &thread, &age)
	if err == sql.ErrNoRows {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("look for long transactions: %w", err)
	}
	return fmt.Sprintf("transaction %d (connection %d) has been open %s on the %s", id, thread, (time.Duration(age) * time.Microsecond).Round(time.Millisecond), side), nil
}

// finalCatchup waits, at most d, until t applied everything up to final
// (the fenced side's last position); the error says whether the budget ran
// out. The cutover and the window's switch end their blackout with it.
func finalCatchup(ctx context.Context, t *binlog.Tailer, final binlog.Position, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := t.WaitFor(wctx, final); err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return fmt.Errorf("the final catch-up to %s did not finish within the budget", final)
		}
		return fmt.Errorf("final catch-up to %s: %w", final, err)
	}
	return nil
}

// startAttempt records an attempt (result says what it does) and returns
// its index, its start, phase (records the time since the previous phase
// under a name) and left (the budget left, at least 10 ms so a wait never
// gets zero). The cutover and the window's switch time attempts alike.
func (r *runner) startAttempt(result string, budget time.Duration) (idx int, start time.Time, phase func(string), left func() time.Duration) {
	start = time.Now()
	idx = r.noteNewAttempt(plans.Attempt{Started: start.UTC(), Phases: map[string]float64{}, Result: result})
	// Saved alongside the attempt, not before it: the fence follows the
	// readiness reading at once (a crash loses only this record).
	go func() { _ = r.save(true) }()
	mark := start
	phase = func(name string) {
		r.mu.Lock()
		r.p.Attempts[idx].Phases[name] = msSince(mark)
		r.mu.Unlock()
		mark = time.Now()
	}
	left = func() time.Duration { return max(budget-time.Since(start), 10*time.Millisecond) }
	return idx, start, phase, left
}

// offlineAndFence takes the moving mappings offline (offline: routers
// wait instead of failing) and fences (fenceRow: no write goes through) at
// once: they are independent, so the blackout pays the longer of the two.
// Both have ended when it returns, so the offline change has committed
// before the caller reads the final position. phase records "fence", then
// "offline" (what the offline change took beyond the fence, 0 when it was
// done first). On a failure the attempt is undone: a timeout backs off
// (errBackedOff); a sharding database that refuses the change or a missing
// privilege stops the step (resumable), with the fence lifted and the
// serving side's mappings online. The cutover and the window's switch
// share it.
func offlineAndFence(ctx context.Context, offline func(context.Context) error, fenceRow func() error, phase func(string), undo func(error) error, serving string) error {
	done := make(chan error, 1)
	go func() { done <- offline(ctx) }()
	ferr := fenceRow()
	phase("fence")
	if oerr := <-done; oerr != nil {
		if uerr := undo(fmt.Errorf("take the mappings offline: %w", oerr)); !errors.Is(uerr, errBackedOff) {
			return uerr
		}
		return oerr
	}
	phase("offline")
	switch {
	case ferr == nil:
		return nil
	case isFenceTimeout(ferr):
		return undo(fmt.Errorf("a transaction held a fenced table beyond the budget: %w", ferr))
	case dbutil.IsPrivilegeErr(ferr):
		// No later attempt would do better: stop now (resumable once granted).
		if uerr := undo(ferr); !errors.Is(uerr, errBackedOff) {
			return uerr
		}
		return fmt.Errorf("install the fence: %w (the shard is back online at the %s; grant what is missing, see docs/servers.md, then resume)", ferr, serving)
	}
	return undo(ferr)
}

// isFenceTimeout reports a fence statement that gave up waiting for a lock
// within its budget: the attempt backs off.
func isFenceTimeout(err error) bool { return fence.IsTimeout(err) || dbutil.IsRetryableLockErr(err) }
