package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/prune"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/watermark"
)

// PruneTables deletes from each table of ts the rows its filter selects,
// chunk by chunk through pr (which holds the throttle): children before
// parents (prune.Order), each table right after GuardRemoval found no shard
// at `at` owning those rows. from (nil: start) is where a table resumes, a
// Done mark skips it; save (nil: none) gets each chunk's mark. Cleanup, the
// prune command, abort and the reverse window all remove rows this way.
// Callers guard the schema's triggers.
func PruneTables(ctx context.Context, store *shardmap.Store, at plans.Endpoint, pr *prune.Pruner, ts []tables.Table,
	from func(table string) watermark.Mark, save func(table string, w watermark.Mark) error) error {
	return pruneTables(ctx, store, at, pr, ts, from, save, nil)
}

// pruneTables is PruneTables; with live (not nil), a table whose rows a
// live shard owns at `at` is skipped and handed to live instead of stopping
// the rest (a stale plan's abort removes what it provably made, and lists
// the rest).
func pruneTables(ctx context.Context, store *shardmap.Store, at plans.Endpoint, pr *prune.Pruner, ts []tables.Table,
	from func(table string) watermark.Mark, save func(table string, w watermark.Mark) error, live func(t tables.Table, err error)) error {
	order, err := prune.Order(ctx, pr.DB, pr.Schema, ts)
	if err != nil {
		return fmt.Errorf("order the tables of %s for deletes: %w", pr.Schema, err)
	}
	for _, t := range order {
		var m watermark.Mark
		if from != nil {
			m = from(t.Name)
		}
		if m.Done {
			continue
		}
		if err := interlock.GuardRemoval(ctx, store, at, &t); err != nil {
			if live != nil && errors.Is(err, ErrLive) {
				live(t, err)
				continue
			}
			return err
		}
		var tableSave func(watermark.Mark) error
		if save != nil {
			tableSave = func(w watermark.Mark) error { return save(t.Name, w) }
		}
		if _, err := pr.Table(ctx, t, m, tableSave); err != nil {
			return err
		}
	}
	return nil
}

// undoTargetCopy removes what a plan copied to its target: the schema it
// created (move, split) or the rows it merged into a live shard (merge),
// every removal guarded by the shard map (GuardRemoval). With kept (not nil),
// a removal the map refuses because a live shard owns it is listed there and
// skipped: a stale plan's abort removes only what it provably made. Abort,
// the stale plan's abort and the reverse window's end all undo a copy here.
func (r *runner) undoTargetCopy(ctx context.Context, what string, kept *[]string) error {
	p := r.p
	live := func(where string, err error) {
		*kept = append(*kept, where+": "+strings.TrimPrefix(err.Error(), ErrLive.Error()+": "))
	}
	if p.DropTargetSchema {
		switch err := interlock.GuardRemoval(ctx, r.env.Store, p.Target, nil); {
		case err != nil && kept != nil && errors.Is(err, ErrLive):
			live("the target schema "+p.Target.Schema+" on "+p.Target.Addr(), err)
		case err != nil:
			return fmt.Errorf("%s: %w", what, err)
		default:
			if err := dbutil.DropSchema(ctx, r.dst, p.Target.Schema, schemaTables(p)); err != nil {
				return fmt.Errorf("%s: drop the target copy %s on %s: %w", what, p.Target.Schema, p.Target.Addr(), err)
			}
		}
	}
	var onLive func(t tables.Table, err error)
	if kept != nil {
		onLive = func(t tables.Table, err error) { live("rows copied into "+p.Target.Schema+"."+t.Name, err) }
	}
	pr := &prune.Pruner{DB: r.dst, Schema: p.Target.Schema, ChunkRows: p.Options.PruneChunkRows}
	if err := pruneTables(ctx, r.env.Store, p.Target, pr, p.AbortTarget, nil, nil, onLive); err != nil {
		return fmt.Errorf("%s: remove the copied rows: %w", what, err)
	}
	return nil
}

// PruneShard is what 'shardctl prune' does: delete, from each sharded table
// of a shard, the rows the shard map gives to another shard (ts carry the
// shard's owned filters), under the shard's operation lock, throttled, with
// the shard's own triggers guarded; with DryRun it only counts. It returns
// one PruneRow per sharded table, in delete order.
func PruneShard(ctx context.Context, store *shardmap.Store, creds dbutil.Creds, at plans.Endpoint, ts []tables.Table, o PruneOptions) (out []PruneRow, err error) {
	db, err := dbutil.Open(ctx, dbutil.Addr{Host: at.Host, Port: at.Port}, creds, "")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if !o.DryRun {
		l, err := lock.Acquire(ctx, store.DB, store.Schema, []string{lock.Name(store.Schema, at.ShardID)}, lock.Holder(fmt.Sprintf("prune shard %d", at.ShardID)))
		if err != nil {
			return nil, err
		}
		defer l.Release()
	}
	thr, err := NewThrottler(ctx, db, plans.Options{MaxRate: o.MaxRate, MaxThreadsRunning: o.MaxThreadsRunning}, creds)
	if err != nil {
		return nil, err
	}
	defer thr.Close()
	pause := plans.Millis(o.SleepMS).D()
	pr := &prune.Pruner{DB: db, Schema: at.Schema, ChunkRows: o.ChunkRows,
		Throttle: func(ctx context.Context) error { return thr.Pause(ctx, o.ChunkRows, pause) }}
	if ts, err = prune.Order(ctx, db, at.Schema, ts); err != nil {
		return nil, err
	}
	// A dry run counts; a run does not count first (a scan of every table
	// as long as the walk that follows, 4 % of a 500k-row prune): the rows
	// it deletes are the rows the shard held but did not own, since no
	// application writes keys a shard does not own.
	var todo []tables.Table
	for _, t := range ts {
		if !t.Sharded {
			continue
		}
		t.Filter.Negate = true
		r := PruneRow{Table: t.Name}
		if o.DryRun {
			n, err := pr.Count(ctx, t)
			if err != nil {
				return nil, err
			}
			r.Rows, r.WouldDelete = n, n
		} else {
			todo = append(todo, t)
		}
		out = append(out, r)
	}
	if o.DryRun {
		return out, nil
	}
	// The shard's own triggers must not fire on these deletes; a guarded
	// trigger behaves the same for applications, and one left guarded by a
	// crash reads as its original next time.
	restore, err := GuardTriggers(ctx, db, at.Schema, ts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := restore(context.WithoutCancel(ctx)); rerr != nil && err == nil {
			err = rerr
		}
	}()
	err = PruneTables(ctx, store, at, pr, todo, nil, func(table string, w watermark.Mark) error {
		for i := range out {
			if out[i].Table == table {
				out[i].Rows, out[i].Deleted = w.Rows, w.Rows
			}
		}
		return nil
	})
	return out, err
}

// PruneOptions are the prune command's settings.
type PruneOptions struct {
	DryRun            bool
	ChunkRows         int
	SleepMS           int
	MaxThreadsRunning int
	MaxRate           int64
}

// PruneRow is one table of a prune: the rows it holds but does not own
// (counted by a dry run; a run reports those it deleted), and what was
// deleted (or, in a dry run, would be).
type PruneRow struct {
	Table       string `json:"table"`
	Rows        int64  `json:"rows"`
	Deleted     int64  `json:"deleted"`
	WouldDelete int64  `json:"would_delete,omitempty"`
}
