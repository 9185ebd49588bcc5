package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/shardctl/shardctl/dbutil"
)

// conservativeCopyRate (rows/s) is what the copy is assumed to reach when
// its duration is weighed against the source's binlog retention: a tenth of
// what it reaches on a quiet server (docs/BENCHMARKS.md), so a busy source
// is covered too.
const conservativeCopyRate = 20000

// retentionRisk says why the source may purge the binary log the tail must
// start from before the copy of rows ends ("": no risk): the copy, at the
// conservative rate (or --max-rate, when lower), takes more than half the
// retention. retention 0 means the server never purges.
func retentionRisk(rows, maxRate int64, retention time.Duration, variable string) string {
	if retention <= 0 || rows <= 0 {
		return ""
	}
	rate := int64(conservativeCopyRate)
	if maxRate > 0 && maxRate < rate {
		rate = maxRate
	}
	est := time.Duration(float64(rows) / float64(rate) * float64(time.Second))
	if 2*est < retention {
		return ""
	}
	return fmt.Sprintf("the copy of about %d rows may take %s (at %d rows/s), and the source purges binary logs after %s (%s): "+
		"if it purges the one the tail starts from, the plan cannot catch up and must be aborted; raise %s on the source for the operation",
		rows, est.Round(time.Second), rate, retention, variable, variable)
}

// binlogRetention reads how long the server keeps its binary logs (0:
// forever), and the variable that says so.
func binlogRetention(ctx context.Context, db *sql.DB) (time.Duration, string, error) {
	var secs int64
	err := db.QueryRowContext(ctx, "SELECT @@global.binlog_expire_logs_seconds").Scan(&secs)
	if dbutil.ErrNumber(err) != 1193 { // 1193: unknown variable (a server before it)
		return time.Duration(secs) * time.Second, "binlog_expire_logs_seconds", err
	}
	var days float64
	err = db.QueryRowContext(ctx, "SELECT @@global.expire_logs_days").Scan(&days)
	return time.Duration(days * float64(24*time.Hour)), "expire_logs_days", err
}
