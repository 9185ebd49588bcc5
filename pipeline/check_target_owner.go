package pipeline

import (
	"context"
	"fmt"

	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
)

// A target schema that is another unfinished plan's target copy (a move
// running or stopped there) is refused as such before the create step: the
// general "target schema exists" refusal would suggest dropping it, which
// would pull the copy from under that plan.
func init() {
	register(Check{
		Name:  "target is not another plan's copy",
		Until: plans.StepCreate,
		Run: func(ctx context.Context, c *CheckEnv) error {
			if c.Store == nil || c.Dst == nil {
				return nil
			}
			// Only a copy that exists can be pulled away (an operator may have
			// dropped a stale plan's half copy and moved there anew).
			if ok, err := schemaExists(ctx, c.Dst, c.Plan.Target.Schema); err != nil || !ok {
				return err
			}
			others, err := planstore.New(c.Store.DB, c.Store.Schema).Unfinished(ctx)
			if err != nil {
				return err
			}
			t := c.Plan.Target
			for _, o := range others {
				if o.ID == c.Plan.ID || o.Target.Host != t.Host || o.Target.Port != t.Port || o.Target.Schema != t.Schema {
					continue
				}
				return fmt.Errorf("%w: the target %s/%s is the target copy of plan %s (%s, next step %s): let that plan finish, or abort it ('shardctl plan abort %s'), which removes the copy",
					ErrRefused, t.Addr(), t.Schema, o.ID, o.State, o.NextStep(), o.ID)
			}
			return nil
		},
	})
}
