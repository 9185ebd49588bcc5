package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/prune"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/snapshot"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/verify"
	"github.com/shardctl/shardctl/watermark"
)

// Preflight checks everything that can be checked before anything changes.
// Planners call it too, so a dry run reports the same refusals.
func Preflight(ctx context.Context, src, dst *sql.DB, p *plans.Plan) error {
	var problems []string
	var format, image string
	if err := src.QueryRowContext(ctx, "SELECT @@global.binlog_format, @@global.binlog_row_image").Scan(&format, &image); err != nil {
		return fmt.Errorf("preflight: read binlog settings of %s: %w", p.Source.Addr(), err)
	}
	var logBin int
	if err := src.QueryRowContext(ctx, "SELECT @@global.log_bin").Scan(&logBin); err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	if logBin != 1 {
		problems = append(problems, fmt.Sprintf("the source %s has no binary log: start it with log_bin, binlog_format=ROW and binlog_row_image=FULL", p.Source.Addr()))
	} else {
		if format != "ROW" {
			problems = append(problems, fmt.Sprintf("the source %s has binlog_format=%s: set it to ROW (SET GLOBAL binlog_format='ROW', and in its config)", p.Source.Addr(), format))
		}
		if image != "FULL" {
			problems = append(problems, fmt.Sprintf("the source %s has binlog_row_image=%s: set it to FULL", p.Source.Addr(), image))
		}
	}
	for _, t := range p.Copy {
		if len(t.PK) == 0 {
			problems = append(problems, fmt.Sprintf("table %s.%s has no primary key: add one (rows are copied, applied and deleted by primary key)%s", p.Source.Schema, t.Name, uniqueKeyHint(ctx, src, p.Source.Schema, t.Name)))
		}
	}
	fkProblems, err := foreignKeyProblems(ctx, src, p)
	if err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	problems = append(problems, fkProblems...)
	fp, err := flavorProblems(ctx, src, dst, p)
	if err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	problems = append(problems, fp...)
	same, err := sameServer(ctx, src, dst)
	if err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	if same && p.Source.Schema == p.Target.Schema {
		problems = append(problems, fmt.Sprintf("the target %s is the source server itself (same schema %s): choose another server", p.Target.Addr(), p.Target.Schema))
	}
	if p.DropTargetSchema && !p.Done(plans.StepCreate) && !(same && p.Source.Schema == p.Target.Schema) {
		n, err := countTables(ctx, dst, p.Target.Schema)
		if err != nil {
			return fmt.Errorf("preflight: %w", err)
		}
		if n > 0 {
			var rows int64
			ts, _ := tables.Inspect(ctx, dst, p.Target.Schema)
			for _, t := range ts {
				rows += t.EstRows
			}
			problems = append(problems, fmt.Sprintf("the target schema %s on %s exists with %d tables (about %d rows): drop it or choose another target", p.Target.Schema, p.Target.Addr(), n, rows))
		}
	}
	if !p.Done(plans.StepFence) {
		if left, err := fence.Installed(ctx, src, p.Source.Schema); err == nil && len(left) > 0 && p.Step(plans.StepFence).Attempts == 0 {
			problems = append(problems, fmt.Sprintf("the source schema %s carries fence triggers from another operation (%s): resume or abort that plan first", p.Source.Schema, strings.Join(left, ", ")))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrRefused, strings.Join(problems, "; "))
	}
	return nil
}

func sameServer(ctx context.Context, a, b *sql.DB) (bool, error) {
	id := func(db *sql.DB) (string, error) {
		var sid, port, host string
		err := db.QueryRowContext(ctx, "SELECT @@server_id, @@port, @@hostname").Scan(&sid, &port, &host)
		return sid + "/" + port + "/" + host, err
	}
	x, err := id(a)
	if err != nil {
		return false, err
	}
	y, err := id(b)
	return x == y, err
}

func countTables(ctx context.Context, db *sql.DB, schema string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", schema).Scan(&n)
	return n, err
}

func (r *runner) preflight(ctx context.Context) error {
	return Preflight(ctx, r.src, r.dst, r.p)
}

// create records the binlog position the tail will start from (first, so no
// change made during the copy is missed), registers a new shard's location,
// and creates the target tables.
func (r *runner) create(ctx context.Context) error {
	if r.p.Checkpoints.Start.IsZero() {
		pos, err := binlog.MasterStatus(ctx, r.src)
		if err != nil {
			return err
		}
		if pos, err = binlog.WithGTID(ctx, r.src, pos); err != nil {
			return err
		}
		r.mu.Lock()
		r.p.Checkpoints.Start = plans.Position(pos)
		r.mu.Unlock()
		if err := r.save(true); err != nil {
			return err
		}
	}
	if r.p.Target.ShardID == NewShard {
		id, err := r.env.Store.AddShard(ctx, r.p.Target.Host, r.p.Target.Port, r.p.Target.Schema)
		if err != nil {
			return err
		}
		r.mu.Lock()
		resolveNewShard(r.p, id)
		r.mu.Unlock()
		if err := r.save(true); err != nil {
			return err
		}
	}
	if err := r.copier().CreateTables(ctx, r.p.Copy); err != nil {
		return err
	}
	return r.createObjects(ctx)
}

// NewShard stands for the shard id a split's create step registers; plans use it
// in changes until then.
const NewShard = -1

func resolveNewShard(p *plans.Plan, id int) {
	p.Target.ShardID = id
	for _, cs := range [][]shardmap.Change{p.Prepare, p.Offline, p.Cutover, p.AfterCleanup, p.Abort} {
		for i := range cs {
			if cs[i].ShardID == NewShard {
				cs[i].ShardID = id
			}
		}
	}
}

// checkpoint records a watermark (update runs under the plan's lock), saves
// the plan (always when done, else at most every 500 ms), and on the third
// call of a step lets the test fault point "during:<step>" kill the process.
func (r *runner) checkpoint(point string, calls *int, done bool, update func()) error {
	r.mu.Lock()
	update()
	*calls++
	n := *calls
	r.mu.Unlock()
	if err := r.save(done); err != nil {
		return err
	}
	if n == 3 {
		if err := r.save(true); err != nil {
			return err
		}
		fault.Hit(point)
	}
	return nil
}

func (r *runner) copier() *snapshot.Copier {
	return &snapshot.Copier{
		Source: r.src, Target: r.dst,
		SourceSchema: r.p.Source.Schema, TargetSchema: r.p.Target.Schema,
		ChunkRows: r.p.Options.ChunkRows,
		ChunkTime: time.Duration(r.p.Options.ChunkTimeMS) * time.Millisecond,
		Throttle:  func(ctx context.Context) error { return r.thr.Wait(ctx, r.p.Options.ChunkRows) },
	}
}

func (r *runner) copy(ctx context.Context) error {
	c := r.copier()
	var total, done int64
	marks := map[string]watermark.Mark{}
	r.mu.Lock()
	for _, t := range r.p.Copy {
		total += t.EstRows
		m := r.p.Checkpoints.Copy[t.Name]
		marks[t.Name] = m
		done += m.Rows
	}
	r.mu.Unlock()
	var pmu sync.Mutex
	saves := 0
	c.Progress = func(_ string, rows int64) {
		pmu.Lock()
		done += rows
		d := done
		pmu.Unlock()
		r.env.Observer.Progress(plans.StepCopy, d, max(total, d), r.thr.Reason())
	}
	err := c.CopyAll(ctx, r.p.Copy, marks, r.p.Options.Parallel, func(table string, w watermark.Mark) error {
		return r.checkpoint("during:copy", &saves, w.Done, func() {
			r.p.Checkpoints.Copy[table] = w
		})
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.p.Result.RowsCopied = 0
	for _, m := range r.p.Checkpoints.Copy {
		r.p.Result.RowsCopied += m.Rows
	}
	r.mu.Unlock()
	return nil
}

// catchup tails the binlog until the target reaches a fresh source position
// within CatchupMS: close enough that the final wait behind the fence is short.
func (r *runner) catchup(ctx context.Context) error {
	limit := time.Duration(r.p.Options.CatchupMS) * time.Millisecond
	for round := 0; ; round++ {
		took, err := r.waitCaughtUp(ctx, 0)
		if err != nil {
			return err
		}
		st := r.tail.Stats()
		r.env.Observer.Progress(plans.StepCatchup, st.RowsApplied, st.RowsApplied, fmt.Sprintf("caught up to %s in %s", st.Applied, took.Round(time.Millisecond)))
		if round == 0 {
			_ = r.save(true)
			fault.Hit("during:catchup")
		}
		if took <= limit {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (r *runner) verify(ctx context.Context) error {
	if !r.p.Options.Verify {
		return errSkipped
	}
	if err := r.ensureTail(ctx); err != nil {
		return err
	}
	v := &verify.Verifier{
		Source: r.src, Target: r.dst,
		SourceSchema: r.p.Source.Schema, TargetSchema: r.p.Target.Schema,
		ChunkRows: r.p.Options.ChunkRows,
		// Rows change under a live load: a chunk that differs is checked again
		// once the tail has applied everything the source had.
		Settle: func(ctx context.Context) error {
			_, err := r.waitCaughtUp(ctx, 0)
			return err
		},
	}
	var done int64
	v.Progress = func(_ string, rows int64) {
		done += rows
		r.env.Observer.Progress(plans.StepVerify, done, done, "")
	}
	res, err := v.All(ctx, r.p.Copy)
	if err != nil {
		return err
	}
	r.p.Result.RowsVerified = res.Rows
	// Chunks that kept changing under writes are compared again behind the fence.
	var firm []verify.Chunk
	r.mu.Lock()
	r.p.Checkpoints.Deferred = nil
	for _, c := range res.Mismatches {
		if c.Changing {
			r.p.Checkpoints.Deferred = append(r.p.Checkpoints.Deferred, plans.ChunkRef{Table: c.Table, Lo: c.Lo, Hi: c.Hi})
		} else {
			firm = append(firm, c)
		}
	}
	r.mu.Unlock()
	res.Mismatches = firm
	if len(res.Mismatches) > 0 {
		var b strings.Builder
		for i, c := range res.Mismatches {
			if i == 5 {
				fmt.Fprintf(&b, "; and %d more", len(res.Mismatches)-5)
				break
			}
			fmt.Fprintf(&b, "; %s rows (%s]..(%s]: source %d rows, target %d rows", c.Table, strings.Join(c.Lo, ","), strings.Join(c.Hi, ","), c.SourceRows, c.TargetRows)
		}
		return fmt.Errorf("%w in %d chunks%s", ErrMismatch, len(res.Mismatches), b.String())
	}
	return nil
}

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
	budget := time.Duration(r.p.Options.MaxBlackoutMS) * time.Millisecond
	backoff := time.Duration(max(r.p.Options.BackoffMS, 1)) * time.Millisecond
	var last error
	postponed := 0
	for i := 0; i < max(1, r.p.Options.FenceAttempts); i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		}
		if err := r.waitPostpone(ctx); err != nil {
			return err
		}
		why, longTrx, err := r.notReady(ctx, budget)
		if err != nil {
			return err
		}
		// InnoDB cannot tell which tables an idle transaction touched: a long
		// transaction postpones at most three attempts in a row, then the fence
		// itself finds out (its metadata-lock wait is bounded by the budget).
		if longTrx {
			postponed++
		}
		if why != "" && (!longTrx || postponed <= 3) {
			r.recordAttempt(plans.Attempt{Started: time.Now().UTC(), Result: "postponed: " + why})
			last = errors.New(why)
			continue
		}
		postponed = 0
		err = r.tryFence(ctx, budget)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errBackedOff) {
			return err
		}
		last = err
	}
	return fmt.Errorf("%w (%s) in %d attempts (last: %v); the shard stays online at the source; resume to try again, or raise --max-blackout", ErrBudget, budget, r.p.Options.FenceAttempts, last)
}

var errBackedOff = errors.New("backed off")

func (r *runner) recordAttempt(a plans.Attempt) int {
	r.mu.Lock()
	r.p.Attempts = append(r.p.Attempts, a)
	idx := len(r.p.Attempts) - 1
	r.mu.Unlock()
	r.env.Log.Info("cutover attempt", "attempt", idx+1, "result", a.Result)
	r.noteAttempt(idx)
	_ = r.save(true) // every attempt is on record, for 'plan show'
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

// notReady says why fencing now would likely overrun the budget: the
// target takes too long to reach a fresh source position (the final
// catch-up would too), or a transaction older than the budget is open on the
// source (it may hold a fenced table's metadata lock).
func (r *runner) notReady(ctx context.Context, budget time.Duration) (why string, longTrx bool, err error) {
	took, err := r.waitCaughtUp(ctx, 0)
	if err != nil {
		return "", false, err
	}
	if took > budget/2 {
		return fmt.Sprintf("the target needed %s to catch up, over half the %s budget", took.Round(time.Millisecond), budget), false, nil
	}
	why, err = longTransaction(ctx, r.src, budget, "source")
	return why, why != "", err
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

// tryFence is one cutover attempt within the budget.
func (r *runner) tryFence(ctx context.Context, budget time.Duration) error {
	// The fence's sessions are opened before the blackout starts.
	sessions, err := fence.OpenSessions(ctx, r.src, len(r.p.Fence), budget)
	if err != nil {
		return fmt.Errorf("open fence sessions: %w", err)
	}
	defer sessions.Close()
	start := time.Now()
	idx := r.recordAttempt(plans.Attempt{Started: start.UTC(), Phases: map[string]float64{}, Result: "fencing"})
	mark := start
	phase := func(name string) {
		r.mu.Lock()
		r.p.Attempts[idx].Phases[name] = msSince(mark)
		r.mu.Unlock()
		mark = time.Now()
	}
	left := func() time.Duration { return max(budget-time.Since(start), 10*time.Millisecond) }
	if err := r.env.Store.Apply(ctx, "take the moving mappings offline", r.p.Offline); err != nil {
		return err
	}
	phase("offline")
	undo := func(reason error) error {
		bg := context.WithoutCancel(ctx)
		err := fence.Remove(bg, r.src, r.p.Source.Schema, fenceNames(r.p), time.Duration(r.p.Options.LockWaitMS)*time.Millisecond)
		if aerr := r.env.Store.Apply(bg, "put the mappings back online", onlineAgain(r.p.Offline)); aerr != nil {
			err = errors.Join(err, aerr)
		}
		r.mu.Lock()
		r.p.Attempts[idx].Result = "backed off: " + reason.Error()
		r.p.Attempts[idx].BlackoutM = msSince(start)
		r.mu.Unlock()
		r.noteAttempt(idx)
		_ = r.save(true)
		if err != nil {
			return fmt.Errorf("%v; and undoing the attempt failed: %w", reason, err)
		}
		return fmt.Errorf("%w: %v", errBackedOff, reason)
	}
	if err := sessions.Install(ctx, r.p.Source.Schema, fenceTables(r.p), left()); err != nil {
		if fence.IsTimeout(err) || dbutil.IsRetryableLockErr(err) {
			return undo(fmt.Errorf("a transaction held a fenced table beyond the budget: %w", err))
		}
		if dbutil.IsPrivilegeErr(err) {
			// No later attempt would do better: stop now (resumable once granted).
			if uerr := undo(err); !errors.Is(uerr, errBackedOff) {
				return uerr
			}
			return fmt.Errorf("install the fence: %w (the shard is back online at the source; grant what is missing, see docs/servers.md, then resume)", err)
		}
		return undo(err)
	}
	phase("fence")
	final, err := binlog.MasterStatus(ctx, r.src)
	if err != nil {
		return undo(err)
	}
	r.mu.Lock()
	r.p.Checkpoints.Final = plans.Position(final)
	r.mu.Unlock()
	if err := r.save(true); err != nil {
		return undo(err)
	}
	wctx, cancel := context.WithTimeout(ctx, left())
	defer cancel()
	if err := r.tail.WaitFor(wctx, final); err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return undo(fmt.Errorf("the final catch-up to %s did not finish within the budget", final))
		}
		return undo(fmt.Errorf("final catch-up to %s: %w", final, err))
	}
	phase("final")
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
	if time.Since(start) > budget {
		return undo(fmt.Errorf("the attempt took %s, over the %s budget", time.Since(start).Round(time.Millisecond), budget))
	}
	// The tail keeps running into the cutover: stopping it is not part of the blackout.
	return nil
}

// recheck compares the deferred verify chunks once more.
func (r *runner) recheck(ctx context.Context) ([]verify.Chunk, error) {
	v := &verify.Verifier{Source: r.src, Target: r.dst, SourceSchema: r.p.Source.Schema, TargetSchema: r.p.Target.Schema}
	var differ []verify.Chunk
	for _, t := range r.p.Copy {
		var cs []verify.Chunk
		for _, d := range r.p.Checkpoints.Deferred {
			if d.Table == t.Name {
				cs = append(cs, verify.Chunk{Table: d.Table, Lo: d.Lo, Hi: d.Hi})
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

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

func fenceTables(p *plans.Plan) []fence.Table {
	out := make([]fence.Table, len(p.Fence))
	for i, f := range p.Fence {
		out[i] = fence.Table{Name: f.Name, Filter: f.Filter}
	}
	return out
}

func fenceNames(p *plans.Plan) []string {
	out := make([]string, len(p.Fence))
	for i, f := range p.Fence {
		out[i] = f.Name
	}
	return out
}

// onlineAgain turns "mark offline" changes into "mark online" ones.
func onlineAgain(cs []shardmap.Change) []shardmap.Change {
	var out []shardmap.Change
	for _, c := range cs {
		if c.Op == shardmap.OpSetStatus && c.Status == shardmap.Offline {
			c.Status = shardmap.Online
			out = append(out, c)
		}
	}
	return out
}

// cutover switches the shard map in one transaction once the target holds
// every write the source acknowledged before the fence.
func (r *runner) cutover(ctx context.Context) error {
	final := binlog.Position(r.p.Checkpoints.Final)
	if final.IsZero() {
		return errors.New("no final position recorded: the fence step did not finish")
	}
	if binlog.Position(r.p.Checkpoints.Applied).Compare(final) < 0 {
		// Resumed after a crash between the fence and here: finish the final catch-up.
		if err := r.ensureTail(ctx); err != nil {
			return err
		}
		if err := r.tail.WaitFor(ctx, final); err != nil {
			return err
		}
	}
	if err := r.windowAtCutover(ctx); err != nil {
		return err
	}
	start := time.Now()
	if err := r.env.Store.Apply(ctx, "cut over", r.p.Cutover); err != nil {
		return err
	}
	if err := r.stopTail(); err != nil {
		return fmt.Errorf("cut over done; stopping the binlog tail: %w", err)
	}
	if err := r.finishObjects(ctx); err != nil {
		return fmt.Errorf("cut over done; schema objects: %w", err)
	}
	r.mu.Lock()
	if n := len(r.p.Attempts); n > 0 {
		a := &r.p.Attempts[n-1]
		if a.Phases != nil {
			a.Phases["cutover"] = msSince(start)
		}
		a.BlackoutM = msSince(a.Started)
		a.Result = "cut over"
		r.p.Result.BlackoutMS = a.BlackoutM
	}
	n := len(r.p.Attempts)
	r.mu.Unlock()
	if n > 0 {
		r.noteAttempt(n - 1)
	}
	return nil
}

// cleanup deletes what the source no longer owns in small chunks (a DROP of
// a large table can stall the server), then drops the schema or lifts the fence.
func (r *runner) cleanup(ctx context.Context) error {
	if reverted(r.p) {
		return r.dropTargetCopy(ctx)
	}
	if r.p.KeepSource {
		return errSkipped
	}
	pause := time.Duration(r.p.Options.PruneSleepMS) * time.Millisecond
	pr := &prune.Pruner{DB: r.src, Schema: r.p.Source.Schema, ChunkRows: r.p.Options.PruneChunkRows,
		Throttle: func(ctx context.Context) error { return r.thr.Pause(ctx, r.p.Options.PruneChunkRows, pause) }}
	var deleted int64
	saves := 0
	pr.Progress = func(_ string, n int64) {
		deleted += n
		r.env.Observer.Progress(plans.StepCleanup, deleted, deleted, r.thr.Reason())
	}
	// The source's own triggers must not fire on cleanup's deletes (an
	// AFTER DELETE trigger would write rows no application delete caused).
	if err := schemaobj.Replace(ctx, r.src, r.p.Source.Schema, r.p.Source.Schema, r.p.SourceTriggers, true); err != nil {
		return fmt.Errorf("guard the source's triggers: %w", err)
	}
	err := PruneTables(ctx, r.env.Store, r.p.Source, pr, r.p.Cleanup, func(table string) watermark.Mark {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.p.Checkpoints.Prune[table]
	}, func(table string, w watermark.Mark) error {
		return r.checkpoint("during:cleanup", &saves, w.Done, func() {
			r.p.Checkpoints.Prune[table] = w
		})
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.p.Result.RowsDeleted = 0
	for _, m := range r.p.Checkpoints.Prune {
		r.p.Result.RowsDeleted += m.Rows
	}
	r.mu.Unlock()
	if r.p.DropSourceSchema {
		if err := GuardRemoval(ctx, r.env.Store, r.p.Source, nil); err != nil {
			return err
		}
		if err := dropSchema(ctx, r.src, r.p.Source.Schema); err != nil {
			return fmt.Errorf("drop source schema %s: %w", r.p.Source.Schema, err)
		}
	} else if err := schemaobj.Replace(ctx, r.src, r.p.Source.Schema, r.p.Source.Schema, r.p.SourceTriggers, false); err != nil {
		return fmt.Errorf("restore the source's triggers: %w", err)
	} else if err := fence.Remove(ctx, r.src, r.p.Source.Schema, fenceNames(r.p), time.Duration(r.p.Options.LockWaitMS)*time.Millisecond); err != nil {
		return err
	}
	return r.env.Store.Apply(ctx, "after cleanup", r.p.AfterCleanup)
}
