package pipeline

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/plans"
)

// A plan with a reverse window needs the target to be a binlog source too
// (ROW, FULL images, an account that can stream it) before anything changes:
// the window's tail reads it back into the source after cutover.
func init() {
	register(Check{
		Name:  "reverse window",
		Until: plans.StepCutover,
		Run: func(ctx context.Context, c *CheckEnv) error {
			wp, err := WindowProblems(ctx, c.Dst, c.Plan)
			if err != nil {
				return err
			}
			if len(wp) > 0 {
				return fmt.Errorf("%w: %s", ErrRefused, strings.Join(wp, "; "))
			}
			return nil
		},
	})
}
