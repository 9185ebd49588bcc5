package checks

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
)

// The tail reads every change from the source's binary log, as full row
// images.
func init() {
	register(Check{
		Name:  "binlog settings",
		Until: plans.StepCreate,
		Run: func(ctx context.Context, c *CheckEnv) error {
			p := c.Plan
			var format, image string
			var logBin int
			if err := c.Src.QueryRowContext(ctx, "SELECT @@global.log_bin, @@global.binlog_format, @@global.binlog_row_image").Scan(&logBin, &format, &image); err != nil {
				return failure.ProbeError("the binlog settings", "source", p.Source.Addr(), err)
			}
			if logBin != 1 {
				return fmt.Errorf("%w: the source %s has no binary log: start it with log_bin, binlog_format=ROW and binlog_row_image=FULL", failure.ErrRefused, p.Source.Addr())
			}
			var problems []string
			if format != "ROW" {
				problems = append(problems, fmt.Sprintf("the source %s has binlog_format=%s: set it to ROW (SET GLOBAL binlog_format='ROW', and in its config)", p.Source.Addr(), format))
			}
			if image != "FULL" {
				problems = append(problems, fmt.Sprintf("the source %s has binlog_row_image=%s: set it to FULL", p.Source.Addr(), image))
			}
			return refuse(problems)
		},
	})
}

// refuse turns a check's problems into its refusal (nil: none).
func refuse(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", failure.ErrRefused, strings.Join(problems, "; "))
}
