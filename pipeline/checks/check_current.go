package checks

import (
	"context"

	"github.com/shardctl/shardctl/pipeline/interlock"
)

// A plan made before its shards moved or changed keys is refused at apply
// and resume (abort handles a stale plan itself: see abortStale).
func init() {
	register(Check{
		Name: "plan is current",
		Run: func(_ context.Context, c *CheckEnv) error {
			if c.Planning {
				return nil // recorded, not compared, when the plan is made
			}
			return interlock.Current(c.Map, c.Plan)
		},
	})
}
