package pipeline

import (
	"context"
	"fmt"

	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// A move or split creates its target schema, and an abort drops it: one
// that already holds tables is someone else's and is never written into.
func init() {
	register(Check{
		Name:  "target schema is new",
		Until: plans.StepCreate,
		Run: func(ctx context.Context, c *CheckEnv) error {
			p := c.Plan
			if !p.DropTargetSchema || c.Map != nil && liveAtTarget(c.Map, p) > 0 {
				return nil // a live shard's schema: the check above refuses it, and says never to drop it
			}
			if same, err := sameSchema(ctx, c.Src, c.Dst, p); err != nil || same {
				return err // the same schema is the check above's refusal
			}
			var n int
			if err := c.Dst.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", p.Target.Schema).Scan(&n); err != nil {
				return probeError("the target schema's tables", "target", p.Target.Addr(), err)
			}
			if n == 0 {
				return nil
			}
			var rows int64
			ts, _ := tables.Inspect(ctx, c.Dst, p.Target.Schema)
			for _, t := range ts {
				rows += t.EstRows
			}
			return fmt.Errorf("%w: the target schema %s on %s exists with %d tables (about %d rows): drop it or choose another target", ErrRefused, p.Target.Schema, p.Target.Addr(), n, rows)
		},
	})
}
