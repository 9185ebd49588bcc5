package checks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/failure"
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
				return fmt.Errorf("%w: %s", failure.ErrRefused, strings.Join(wp, "; "))
			}
			return nil
		},
	})
}

// WindowProblems is the preflight check of what the reverse direction needs:
// a move, split or merge (the operations whose switch can run backwards),
// and a target that writes a ROW/FULL binlog shardctl's account may read,
// since the window's tail reads it back into the source.
func WindowProblems(ctx context.Context, dst *sql.DB, p *plans.Plan) ([]string, error) {
	if p.Window == nil && p.Options.ReverseWindowS <= 0 {
		return nil, nil
	}
	if !operation.Of(p.Operation).ReverseWindow {
		return []string{fmt.Sprintf("--reverse-window is not supported for %s: run it without a window", p.Operation)}, nil
	}
	var problems []string
	var logBin int
	var format, image string
	if err := dst.QueryRowContext(ctx, "SELECT @@global.log_bin, @@global.binlog_format, @@global.binlog_row_image").Scan(&logBin, &format, &image); err != nil {
		return nil, fmt.Errorf("preflight: read binlog settings of the target %s: %w", p.Target.Addr(), err)
	}
	switch {
	case logBin != 1:
		problems = append(problems, fmt.Sprintf("--reverse-window: the target %s has no binary log to tail back: start it with log_bin, binlog_format=ROW and binlog_row_image=FULL", p.Target.Addr()))
	case format != "ROW" || image != "FULL":
		problems = append(problems, fmt.Sprintf("--reverse-window: the target %s logs binlog_format=%s binlog_row_image=%s: set ROW and FULL", p.Target.Addr(), format, image))
	}
	if _, err := binlog.MasterStatus(ctx, dst); err != nil && !errors.Is(err, binlog.ErrBinlogOff) {
		problems = append(problems, fmt.Sprintf("--reverse-window: the account cannot read the target's binlog position (grant REPLICATION CLIENT / BINLOG MONITOR and REPLICATION SLAVE on %s): %v", p.Target.Addr(), err))
	} else if ok, err := canReplicate(ctx, dst); err == nil && !ok {
		problems = append(problems, fmt.Sprintf("--reverse-window: the account may not read the target's binlog: grant REPLICATION SLAVE on %s", p.Target.Addr()))
	}
	return problems, nil
}

// canReplicate reports whether the current account holds REPLICATION SLAVE (or ALL).
func canReplicate(ctx context.Context, db *sql.DB) (bool, error) {
	rows, err := db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		return false, err
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return false, err
		}
		g = strings.ToUpper(g)
		if strings.Contains(g, " ON *.*") && (strings.Contains(g, "ALL PRIVILEGES") || strings.Contains(g, "REPLICATION SLAVE") || strings.Contains(g, "REPLICATION REPLICA")) {
			return true, nil
		}
	}
	return false, rows.Err()
}
