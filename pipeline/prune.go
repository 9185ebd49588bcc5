package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
		if err := GuardRemoval(ctx, store, at, &t); err != nil {
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
		switch err := GuardRemoval(ctx, r.env.Store, p.Target, nil); {
		case err != nil && kept != nil && errors.Is(err, ErrLive):
			live("the target schema "+p.Target.Schema+" on "+p.Target.Addr(), err)
		case err != nil:
			return fmt.Errorf("%s: %w", what, err)
		default:
			if err := dropSchema(ctx, r.dst, p.Target.Schema, schemaTables(p)); err != nil {
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
