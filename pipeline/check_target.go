package pipeline

import (
	"context"
	"fmt"

	"github.com/shardctl/shardctl/plans"
)

// A target schema where another live shard lives is refused before its
// create step: the general "target schema exists" refusal would suggest
// dropping it, which here means dropping a live shard.
func init() {
	register(Check{
		Name:  "target is not a live shard",
		Until: plans.StepCreate,
		Run: func(_ context.Context, c *CheckEnv) error {
			if id := liveAtTarget(c.Map, c.Plan); id > 0 {
				return fmt.Errorf("%w: shard %d lives at the target %s/%s (it is in the shard map with mappings): choose another target server or schema; never drop it", ErrRefused, id, c.Plan.Target.Addr(), c.Plan.Target.Schema)
			}
			return nil
		},
	})
}
