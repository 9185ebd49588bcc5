package pipeline

// The blackout, in one place: everything between "the rows are still
// writable at the source" and "the shard map points at the target".
//
//	fence step:   wait while postponed (postpone file, before-fence hook),
//	              check readiness (lag, long transactions), then per attempt:
//	              mappings offline -> fence triggers -> final position ->
//	              final catch-up -> recheck of deferred chunks;
//	              any overrun backs off (fence lifted, mappings online) and
//	              the next attempt follows after a growing pause.
//	cutover step: finish the final catch-up after a crash, switch the shard
//	              map in one transaction (mappings online at the target),
//	              stop the tail, finish the schema objects.
//
// The reverse window's switch (window.go) runs the same attempt loop
// (attempts) and times its attempts the same way (startAttempt).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/verify"
)

// fence takes the moving rows offline: mark the mappings offline, install
// the fence on the source, and only then read the source's final position
// (reading it before the fence holds lets writes slip in: vitess #16563),
// then wait for the target to apply exactly that much. The whole blackout has
// a budget (MaxBlackoutMS): an attempt that cannot fence within it (a
// transaction holds a table) or cannot finish the final catch-up within it
// lifts the fence, puts the mappings back online, and is retried after a
// back-off; the tail keeps running in between. Before each attempt it checks
// what would make it fail (lag, long transactions: vitess #9525), and waits
// while the postpone file exists.
func (r *runner) fence(ctx context.Context) error {
	budget := r.p.Options.MaxBlackoutMS.D()
	var sessions *fence.Sessions
	last, err := r.attempts(ctx, attemptLoop{
		wait: r.waitPostpone,
		// The fence's sessions are opened and its triggers armed before
		// readiness is checked, so the attempt follows a good reading at
		// once and fencing is one UPDATE (fence/armed.go).
		prepare: func(ctx context.Context) (func(), string, error) {
			// A first raise of the counters, outside the blackout: behind the
			// fence only ids lost since then still need an ALTER. Best effort:
			// the raise behind the fence is the one that counts.
			if err := r.carryCounters(ctx, r.src, r.p.Source.Schema, r.dst, r.p.Target.Schema, r.p.Copy, true); err != nil {
				r.env.Log.Warn("raising the AUTO_INCREMENT counters ahead of the blackout", "err", err)
			}
			ts := fenceTables(r.p)
			if fault.On("during:fence:half") && len(ts) > 1 {
				// A crash test's point: half the tables armed when the fence row
				// is set, to prove resume copes with a partial arming.
				ts = ts[:len(ts)/2]
			}
			s, why, err := armFence(ctx, r.src, r.p.Source.Schema, ts, budget)
			if s == nil {
				return nil, why, err
			}
			sessions = s
			return s.Close, "", nil
		},
		caughtUp: func(ctx context.Context) (time.Duration, error) {
			if fault.On("fail:fence:ready") { // tests: readiness fails with the fence armed (the tail lost the target)
				return 0, errors.New("injected: the readiness check failed")
			}
			return r.waitCaughtUp(ctx, 0)
		},
		longTrx:   func(ctx context.Context) (string, error) { return longTransaction(ctx, r.src, budget, "source") },
		other:     "the target",
		try:       func(ctx context.Context, note string) error { return r.tryFence(ctx, budget, note, sessions) },
		postponed: "postponed: ",
		backedOff: "backed off: ",
		blockers: func(ctx context.Context) []plans.Blocker {
			return r.reportBlockers(ctx, r.src, r.p.Source.Schema, fenceNames(r.p))
		},
		kill: r.killBefore(r.src, r.p.Source.Schema, fenceNames(r.p)),
	})
	if last == nil && err == nil {
		return nil
	}
	// No attempt went through, or the step stopped (the tail failed, a
	// signal): unless an attempt's end was saved, which a resume cuts over
	// behind, no fence holds and the armed triggers go.
	r.mu.Lock()
	held := r.p.Step(plans.StepFence).State == plans.Done
	r.mu.Unlock()
	if !held {
		if rerr := fence.Remove(context.WithoutCancel(ctx), r.src, r.p.Source.Schema, fenceNames(r.p), r.p.Options.LockWaitMS.D()); rerr != nil {
			r.env.Log.Warn("removing the armed fence triggers", "err", rerr)
		}
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w (%s) in %d attempts (last: %v); the shard stays online at the source; resume to try again, or raise --max-blackout", ErrBudget, budget, r.p.Options.FenceAttempts, last)
}

// attemptLoop is what differs between the cutover and the reverse window's
// switch; runner.attempts is the loop they share.
type attemptLoop struct {
	wait      func(ctx context.Context) error                                // holds while postponed
	prepare   func(ctx context.Context) (done func(), why string, err error) // optional: sets up an attempt ahead of readiness; why: it backed off
	caughtUp  func(ctx context.Context) (time.Duration, error)               // how long the other side takes to reach a fresh position
	longTrx   func(ctx context.Context) (string, error)                      // a long transaction that may hold a fenced table, or ""
	other     string                                                         // the side that catches up, for messages
	try       func(ctx context.Context, note string) error                   // one attempt (note: how readiness ended); errBackedOff: undone, try again
	postponed string                                                         // prefix of a postponed attempt's result
	backedOff string                                                         // prefix of a backed-off attempt's result
	blockers  func(ctx context.Context) []plans.Blocker                      // optional: the sessions holding the fenced tables, for a lock wait's record (blockers.go)
	kill      func(ctx context.Context)                                      // optional: --kill-blockers, before every attempt after the first
}

// named lists the blocking sessions where the loop can.
func (l attemptLoop) named(ctx context.Context) []plans.Blocker {
	if l.blockers == nil {
		return nil
	}
	return l.blockers(ctx)
}

// armFence opens a fence session per table of ts on db and arms their
// fence in schema (fence/armed.go), ahead of an attempt's readiness check.
// why is set when arming gave up within the budget (a transaction held a
// table): the attempt backs off, with nothing fenced or offline. The
// cutover and the window's switch arm alike.
func armFence(ctx context.Context, db *sql.DB, schema string, ts []fence.Table, budget time.Duration) (s *fence.Sessions, why string, err error) {
	s, err = fence.OpenSessions(ctx, db, len(ts), budget)
	if err != nil {
		return nil, "", fmt.Errorf("open fence sessions on %s: %w", schema, err)
	}
	if err := s.Arm(ctx, schema, ts, budget); err != nil {
		s.Close()
		if isFenceTimeout(err) {
			return nil, fmt.Sprintf("arming the fence: a transaction held a table beyond the %s budget (%v)", budget, err), nil
		}
		return nil, "", err
	}
	return s, "", nil
}

// attempts runs up to FenceAttempts attempts with a doubling back-off
// between them, waiting out a postponement and checking readiness before
// each. It returns nil, nil when an attempt went through; the last reason
// (non-nil) when none fitted; or the error that stopped it.
func (r *runner) attempts(ctx context.Context, l attemptLoop) (last error, err error) {
	budget := r.p.Options.MaxBlackoutMS.D()
	backoff := max(r.p.Options.BackoffMS, 1).D()
	postponed := 0
	for i := 0; i < max(1, r.p.Options.FenceAttempts); i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			if l.kill != nil {
				l.kill(ctx)
			}
		}
		if err := l.wait(ctx); err != nil {
			return nil, err
		}
		// InnoDB cannot tell which tables an idle transaction touched: a long
		// transaction postpones at most three attempts in a row, then the fence
		// itself finds out (arming it waits for metadata locks within the budget).
		why, err := l.longTrx(ctx)
		if err != nil {
			return nil, err
		}
		if why != "" {
			if postponed++; postponed <= 3 {
				r.recordAttempt(plans.Attempt{Started: time.Now().UTC(), Result: l.postponed + why, Blockers: l.named(ctx)})
				last = errors.New(why)
				continue
			}
		}
		done := func() {}
		if l.prepare != nil {
			d, why, err := l.prepare(ctx)
			if err != nil {
				return nil, err
			}
			if why != "" {
				// Arming the fence gave up within the budget: an attempt that
				// backed off, though nothing was offline.
				postponed = 0
				r.recordAttempt(plans.Attempt{Started: time.Now().UTC(), Result: l.backedOff + why, Blockers: l.named(ctx)})
				last = errors.New(why)
				continue
			}
			done = d
		}
		why, note, err := r.ready(ctx, l, budget)
		if err != nil {
			done()
			return nil, err
		}
		if why != "" {
			done()
			r.recordAttempt(plans.Attempt{Started: time.Now().UTC(), Result: l.postponed + why})
			last = errors.New(why)
			continue
		}
		postponed = 0
		err = l.try(ctx, note)
		done()
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

// ready re-checks, without burning an attempt, until the other side reaches
// a fresh position quickly enough to fence (readiness). why is set when it
// never did within the patience and not even under the old half-budget rule
// (the attempt is postponed); note says when the old rule let it through.
func (r *runner) ready(ctx context.Context, l attemptLoop, budget time.Duration) (why, note string, err error) {
	start := time.Now()
	for {
		took, err := l.caughtUp(ctx)
		if err != nil {
			return "", "", err
		}
		switch v := readiness(took, budget, time.Since(start)); v {
		case fenceNow:
			return "", "", nil
		case fenceRelaxed:
			return "", fmt.Sprintf(" (readiness: %s did not reach a fresh position within %s for %s; fenced at %s, under half the budget)",
				l.other, freshBound(budget), time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond)), nil
		case notReady:
			return fmt.Sprintf("%s needed %s to catch up, over half the %s budget", l.other, took.Round(time.Millisecond), budget), "", nil
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

// tryFence is one cutover attempt within the budget; note (how readiness
// ended) goes into the attempt's result.
func (r *runner) tryFence(ctx context.Context, budget time.Duration, note string, sessions *fence.Sessions) error {
	idx, start, phase, left := r.startAttempt(attemptFencing+note, budget)
	var ended chan error // the step's end, saved alongside the final catch-up
	undo := func(reason error) error {
		if ended != nil {
			// Forget the step's end before the fence is lifted: a resume
			// must not cut over without it.
			if err := <-ended; err == nil {
				r.mu.Lock()
				r.p.Step(plans.StepFence).State = plans.Running
				r.mu.Unlock()
				if err := r.save(true); err != nil {
					return fmt.Errorf("%v; and the plan could not be saved, so the fence stays (resume cuts over): %w", reason, err)
				}
			}
			ended = nil
		}
		bg := context.WithoutCancel(ctx)
		err := fence.Remove(bg, r.src, r.p.Source.Schema, fenceNames(r.p), r.p.Options.LockWaitMS.D())
		if aerr := r.env.Store.Apply(bg, "put the mappings back online", onlineAgain(r.p.Offline)); aerr != nil {
			err = errors.Join(err, aerr)
		}
		took := msSince(start)
		var held []plans.Blocker
		if isFenceTimeout(reason) { // named after the fence is lifted: not part of the blackout
			held = r.reportBlockers(bg, r.src, r.p.Source.Schema, fenceNames(r.p))
		}
		r.mu.Lock()
		r.p.Attempts[idx].Result = "backed off: " + reason.Error()
		r.p.Attempts[idx].BlackoutM = took
		r.p.Attempts[idx].Blockers = held
		r.mu.Unlock()
		r.noteAttempt(idx)
		_ = r.save(true)
		if err != nil {
			return fmt.Errorf("%v; and undoing the attempt failed: %w", reason, err)
		}
		return fmt.Errorf("%w: %v", errBackedOff, reason)
	}
	offline := func(ctx context.Context) error {
		err := r.env.Store.Apply(ctx, "take the moving mappings offline", r.p.Offline)
		if err == nil {
			fault.Hit("during:fence:offline")
		}
		return err
	}
	fenceRow := func() error { return sessions.Fence(ctx, r.p.Source.Schema, left()) }
	if err := offlineAndFence(ctx, offline, fenceRow, phase, undo, plans.SideSource); err != nil {
		return err
	}
	fault.Hit("during:fence:half") // the fence row set, half the tables armed (prepare)
	final, err := binlog.MasterStatus(ctx, r.src)
	if err != nil {
		return undo(err)
	}
	// The step's end (with Final, which the cutover reads) is saved while
	// the target catches up, not after: a crash from then on resumes at the
	// cutover, which finishes the catch-up behind the fence still in place;
	// an attempt that backs off forgets it again before lifting the fence.
	r.mu.Lock()
	r.p.Checkpoints.Final = plans.Position(final)
	r.p.Step(plans.StepFence).State = plans.Done
	r.mu.Unlock()
	ended = make(chan error, 1)
	go func() { ended <- r.save(true) }()
	at, t0 := r.tail.Stats(), time.Now()
	if err := finalCatchup(ctx, r.tail, final, left()); err != nil {
		return undo(err)
	}
	phase("final")
	// What the final catch-up had to do, for the benchmark's analysis.
	st := r.tail.Stats()
	r.env.Log.Info("final catch-up", "from", at.Applied, "to", final, "rows", st.RowsApplied-at.RowsApplied, "events", st.Events-at.Events, "took", time.Since(t0))
	if len(r.p.Checkpoints.Deferred) > 0 {
		// The source is still and the target has all of it: an exact comparison.
		vctx, cancel := context.WithTimeout(ctx, left())
		defer cancel()
		differ, err := r.recheck(vctx)
		if err != nil {
			if ctx.Err() == nil && vctx.Err() != nil {
				return undo(fmt.Errorf("re-checking %d changing chunks did not fit the budget", len(r.p.Checkpoints.Deferred)))
			}
			return undo(err)
		}
		if len(differ) > 0 {
			c := differ[0]
			err := fmt.Errorf("%w: %s rows (%s]..(%s] differ behind the fence: source %d rows, target %d rows", ErrMismatch, c.Table,
				strings.Join(c.Lo, ","), strings.Join(c.Hi, ","), c.SourceRows, c.TargetRows)
			if uerr := undo(err); !errors.Is(uerr, errBackedOff) {
				return uerr
			}
			return err
		}
		phase("recheck")
	}
	if err := <-ended; err != nil {
		ended = nil // not saved: the plan on disk still has the step running
		return undo(err)
	}
	ended <- nil // for undo below
	if time.Since(start) > budget {
		return undo(fmt.Errorf("the attempt took %s, over the %s budget", time.Since(start).Round(time.Millisecond), budget))
	}
	// The tail keeps running into the cutover: stopping it is not part of the blackout.
	return nil
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

// attemptFencing starts the result of a cutover attempt under way; the
// cutover replaces it with "cut over", keeping what follows (readiness's note).
const attemptFencing = "fencing"

// recheck compares the deferred verify chunks once more.
func (r *runner) recheck(ctx context.Context) ([]verify.Chunk, error) {
	v := &verify.Verifier{Source: r.src, Target: r.dst, SourceSchema: r.p.Source.Schema, TargetSchema: r.p.Target.Schema}
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
