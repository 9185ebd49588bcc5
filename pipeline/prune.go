package pipeline

import (
	"context"
	"fmt"

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
