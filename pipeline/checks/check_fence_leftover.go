package checks

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
)

// Fence triggers another operation left on the source mean that operation is
// not finished: a second one would take its fence for its own.
func init() {
	register(Check{
		Name:  "no other operation's fence",
		Until: plans.StepFence,
		Run: func(ctx context.Context, c *CheckEnv) error {
			left, err := fence.Installed(ctx, c.Src, c.Plan.Source.Schema)
			if err != nil || len(left) == 0 {
				return nil // unreadable triggers refuse nothing here: the fence step reads them again
			}
			return fmt.Errorf("%w: the source schema %s carries fence triggers from another operation (%s): resume or abort that plan first", failure.ErrRefused, c.Plan.Source.Schema, strings.Join(left, ", "))
		},
	})
}
