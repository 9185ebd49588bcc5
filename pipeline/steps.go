package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/prune"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/snapshot"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/verify"
	"github.com/shardctl/shardctl/watermark"
)

// preflight records that the checks passed: every refusal before a step is
// a registered check (checks.go), and runChecks ran them all, under the
// plan's locks, just before the steps. It warns when the source may purge
// its binary log before the copy ends (a purged start position stops the
// plan for good, pipeline.go).
func (r *runner) preflight(ctx context.Context) error {
	retention, variable, err := binlogRetention(ctx, r.src)
	if err != nil {
		r.env.Log.Warn("could not read the source's binlog retention", "source", r.p.Source.Addr(), "err", err)
		return nil
	}
	var rows int64
	for _, t := range r.p.Copy {
		rows += t.EstRows
	}
	if why := retentionRisk(rows, r.p.Options.MaxRate, retention, variable); why != "" {
		r.env.Log.Warn("binlog retention: "+why, "source", r.p.Source.Addr())
	}
	return nil
}

// create records the binlog position the tail will start from (first, so no
// change made during the copy is missed), applies the plan's Prepare changes,
// creates the target tables and raises a merge target's counters.
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
	if err := r.prepare(ctx); err != nil {
		return err
	}
	if err := r.copier().CreateTables(ctx, r.p.Copy); err != nil {
		return err
	}
	if err := r.raiseTargetCounters(ctx); err != nil { // before the first row is copied
		return err
	}
	return r.createObjects(ctx)
}

// prepare applies the plan's Prepare changes (a split's: register the new
// shard's location). The id a registered location gets replaces
// shardmap.NewShard in the plan's target and in every change it carries.
func (r *runner) prepare(ctx context.Context) error {
	if len(r.p.Prepare) == 0 {
		return nil
	}
	if err := r.env.Store.Apply(ctx, "prepare", r.p.Prepare); err != nil {
		return err
	}
	fault.Hit("prepare:registered") // tests: a crash before the new shard's id is saved
	for _, c := range r.p.Prepare {
		if c.Op != shardmap.OpAddLocation || c.ShardID != shardmap.NewShard {
			continue
		}
		id, err := r.env.Store.AddShard(ctx, c.Host, c.Port, c.Schema) // registered above: returns its id
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
	return nil
}

// resolveRegistered gives a plan that registered its new shard's location
// but stopped before it saved the id (a crash, a failure right after) that
// id, found by the location's address, so its abort removes the location.
func resolveRegistered(ctx context.Context, store *shardmap.Store, p *plans.Plan) error {
	if p.Step(plans.StepCreate).Attempts == 0 {
		return nil // nothing registered yet: a location at that address is not the plan's
	}
	for _, c := range p.Prepare {
		if c.Op != shardmap.OpAddLocation || c.ShardID != shardmap.NewShard {
			continue
		}
		m, err := store.Load(ctx)
		if err != nil {
			return err
		}
		for _, l := range m.Locations {
			if l.Host == c.Host && l.Port == c.Port && l.Schema == c.Schema {
				resolveNewShard(p, l.ShardID)
			}
		}
	}
	return nil
}

func resolveNewShard(p *plans.Plan, id int) {
	if p.Target.ShardID == shardmap.NewShard {
		p.Target.ShardID = id
	}
	for _, cs := range [][]shardmap.Change{p.Prepare, p.Offline, p.Cutover, p.AfterCleanup, p.Abort} {
		for i := range cs {
			if cs[i].ShardID == shardmap.NewShard {
				cs[i].ShardID = id
			}
		}
	}
}

// pruneScope counts, before a table's first delete, the rows the cleanup
// has to delete (the source is fenced: the count stays true), and on a
// resume makes the table's deleted rows that count minus what is left, so
// rows deleted after the last saved mark are counted too.
func (r *runner) pruneScope(ctx context.Context, pr *prune.Pruner) error {
	changed := false
	for _, t := range r.p.Cleanup {
		r.mu.Lock()
		m := r.p.Checkpoints.Prune[t.Name]
		scope, counted := r.p.Checkpoints.PruneScope[t.Name]
		r.mu.Unlock()
		fresh := m.Rows == 0 && m.After == nil
		if m.Done || !counted && !fresh {
			continue // done, or begun by a version that did not count
		}
		n, err := pr.Count(ctx, t)
		if err != nil {
			return err
		}
		r.mu.Lock()
		if !counted {
			if r.p.Checkpoints.PruneScope == nil {
				r.p.Checkpoints.PruneScope = map[string]int64{}
			}
			r.p.Checkpoints.PruneScope[t.Name] = n
		} else {
			m.Rows = max(scope-n, m.Rows)
			r.p.Checkpoints.Prune[t.Name] = m
		}
		r.mu.Unlock()
		changed = true
	}
	if !changed {
		return nil
	}
	return r.save(true)
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
		ChunkTime: r.p.Options.ChunkTimeMS.D(),
		Throttle:  func(ctx context.Context) error { return r.thr.Wait(ctx, r.p.Options.ChunkRows) },
	}
}

// copy copies every table; with --on-ddl apply it watches the tables'
// columns and carries a change made meanwhile (carryDuringCopy), then
// copies on.
func (r *runner) copy(ctx context.Context) error {
	c := r.copier()
	c.WatchDDL = r.p.Options.OnDDL == binlog.DDLApply
	var total, done int64
	r.mu.Lock()
	for _, t := range r.p.Copy {
		total += t.EstRows
		done += r.p.Checkpoints.Copy[t.Name].Rows
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
	start := time.Now()
	save := func(table string, w watermark.Mark) error {
		if !w.Done {
			fault.Hit("copy:" + table) // tests: hold or kill the copy of one table part-way
		}
		if w.Done {
			// Which table ends when shows an operator where a copy's time goes.
			r.env.Log.Info("table copied", "table", table, "rows", w.Rows, "after", time.Since(start).Round(time.Millisecond))
		}
		return r.checkpoint("during:copy", &saves, w.Done, func() {
			r.p.Checkpoints.Copy[table] = w
		})
	}
	quiet := 0
	for {
		r.mu.Lock()
		ts := slices.Clone(r.p.Copy) // a carried schema change replaces a table's columns
		marks := maps.Clone(r.p.Checkpoints.Copy)
		r.mu.Unlock()
		err := c.CopyAll(ctx, ts, marks, r.p.Options.Parallel, save)
		if c.WatchDDL && errors.Is(err, snapshot.ErrDefinitionChanged) {
			if err := r.carryDuringCopy(ctx, err, &quiet); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	r.mu.Lock()
	r.p.Result.RowsCopied = watermark.Rows(r.p.Checkpoints.Copy)
	r.mu.Unlock()
	return nil
}

// catchup tails the binlog until the target reaches a fresh source position
// within CatchupMS: close enough that the final wait behind the fence is short.
func (r *runner) catchup(ctx context.Context) error {
	limit := r.p.Options.CatchupMS.D()
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
	if err := r.recheckKeys(ctx); err != nil {
		return err
	}
	if !r.p.Options.Verify {
		return errSkipped
	}
	if err := r.ensureTail(ctx); err != nil {
		return err
	}
	// Rows change under a live load: the target is in step with the source
	// once the tail has applied everything the source had, and the source
	// has committed everything the tail applied (binlog.SourceCommitted).
	settle := func(ctx context.Context) error {
		if _, err := r.waitCaughtUp(ctx, 0); err != nil {
			return err
		}
		return r.tail.SourceCommitted(ctx)
	}
	unfrozen, err := r.cascadeChildren(ctx)
	if err != nil {
		return err
	}
	v := &verify.Verifier{
		Source: r.src, Target: r.dst,
		SourceSchema: r.p.Source.Schema, TargetSchema: r.p.Target.Schema,
		ChunkRows: r.p.Options.ChunkRows,
		Threads:   r.p.Options.VerifyThreads,
		// A table whose chunks differ under writes is compared in one
		// snapshot per side, taken in step behind a brief read lock on the
		// source table (verify/freeze.go); where that cannot be had, chunk
		// by chunk: a chunk that differs is checked again after a settle,
		// one settle serving every chunk waiting for it (verify/walk.go).
		Freeze: settle, Settle: settle, Unfrozen: unfrozen,
		OnFreeze: func(table string, held time.Duration, err error) {
			if err != nil {
				r.env.Log.Info("verify: table compared chunk by chunk", "table", table, "reason", err.Error())
				return
			}
			r.env.Log.Info("verify: table compared in one snapshot per side", "table", table, "read_lock", held.Round(time.Microsecond))
		},
		Narrow: true, // a stop at verify names the rows
	}
	var done int64
	v.Progress = func(_ string, rows int64) {
		done += rows
		r.env.Observer.Progress(plans.StepVerify, done, done, "")
	}
	r.mu.Lock()
	ts := slices.Clone(r.p.Copy) // a carried schema change may replace a table's columns meanwhile
	r.mu.Unlock()
	res, err := v.All(ctx, ts)
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
			r.p.Checkpoints.Deferred = append(r.p.Checkpoints.Deferred, c.Range)
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
			fmt.Fprintf(&b, "; %s rows %s: source %d rows, target %d rows", c.Table, c.Bounds(), c.SourceRows, c.TargetRows)
			if len(c.Rows) > 0 || c.MoreRows > 0 {
				fmt.Fprintf(&b, " (%s)", c.RowsText(5))
			}
		}
		return fmt.Errorf("%w in %d chunks%s; 'shardctl verify --plan %s' lists the rows, --repair makes the target match", ErrMismatch, len(res.Mismatches), b.String(), r.p.ID)
	}
	return nil
}

// cascadeChildren names the source tables a foreign key's cascade
// changes: a read lock on such a table does not hold off the parent's
// writes on every flavor, so verify compares them chunk by chunk.
func (r *runner) cascadeChildren(ctx context.Context) ([]string, error) {
	fks, err := tables.ForeignKeys(ctx, r.src, r.p.Source.Schema)
	if err != nil {
		return nil, fmt.Errorf("verify: read the foreign keys of %s: %w", r.p.Source.Schema, err)
	}
	var out []string
	for _, k := range fks {
		if k.Cascades() || k.OnUpdate == "CASCADE" || k.OnUpdate == "SET NULL" {
			out = append(out, k.Table)
		}
	}
	return out, nil
}

// cleanup deletes what the source no longer owns in small chunks, then
// drops the schema or lifts the fence; a whole shard's schema is dropped
// without the deletes where a DROP does not stall the server (dropsWhole).
func (r *runner) cleanup(ctx context.Context) error {
	if !window.Reverted(r.p) && r.p.KeepSource {
		return errSkipped
	}
	if err := r.awaitRouters(ctx); err != nil {
		return err
	}
	if window.Reverted(r.p) {
		return r.dropTargetCopy(ctx)
	}
	whole, err := r.dropsWhole(ctx)
	if err != nil {
		return fmt.Errorf("cleanup of %s/%s: %w", r.p.Source.Addr(), r.p.Source.Schema, err)
	}
	if whole {
		fault.Hit("during:cleanup") // tests: a crash with the drop about to run
	} else if err := r.deleteRows(ctx); err != nil {
		return err
	}
	if r.p.DropSourceSchema {
		if err := interlock.GuardRemoval(ctx, r.env.Store, r.p.Source, nil); err != nil {
			return err
		}
		if err := dbutil.DropSchema(ctx, r.src, r.p.Source.Schema, schemaTables(r.p)); err != nil {
			return fmt.Errorf("drop source schema %s: %w", r.p.Source.Schema, err)
		}
	} else if err := schemaobj.Replace(ctx, r.src, r.p.Source.Schema, r.p.Source.Schema, r.p.SourceTriggers, false); err != nil {
		return fmt.Errorf("restore the source's triggers: %w", err)
	} else if err := fence.Remove(ctx, r.src, r.p.Source.Schema, fenceNames(r.p), r.p.Options.LockWaitMS.D()); err != nil {
		return err
	}
	return r.env.Store.Apply(ctx, "after cleanup", r.p.AfterCleanup)
}

// deleteRows deletes the rows of the cleanup's tables that the source no
// longer owns, in chunks, with the source's own triggers kept from firing.
func (r *runner) deleteRows(ctx context.Context) error {
	pause := r.p.Options.PruneSleepMS.D()
	pr := &prune.Pruner{DB: r.src, Schema: r.p.Source.Schema, ChunkRows: r.p.Options.PruneChunkRows,
		Throttle: func(ctx context.Context) error { return r.thr.Pause(ctx, r.p.Options.PruneChunkRows, pause) }}
	var deleted, chunks int64
	saves := 0
	pr.Progress = func(_ string, n int64) {
		deleted += n
		if chunks++; chunks == 3 {
			fault.Hit("cleanup:deleted") // tests: a crash with a chunk deleted and not yet recorded
		}
		r.env.Observer.Progress(plans.StepCleanup, deleted, deleted, r.thr.Reason())
	}
	// The source's own triggers must not fire on cleanup's deletes (an
	// AFTER DELETE trigger would write rows no application delete caused).
	if err := schemaobj.Replace(ctx, r.src, r.p.Source.Schema, r.p.Source.Schema, r.p.SourceTriggers, true); err != nil {
		return fmt.Errorf("guard the source's triggers: %w", err)
	}
	if err := r.pruneScope(ctx, pr); err != nil {
		return err
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
	r.p.Result.RowsDeleted = watermark.Rows(r.p.Checkpoints.Prune)
	r.mu.Unlock()
	return nil
}
