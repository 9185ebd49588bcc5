package pipeline

import (
	"context"
	"database/sql"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/throttle"
)

// Throttler paces a run's chunked work (package throttle).
type Throttler = throttle.Throttler

// NewThrottler paces work on src by the plan options' limits. Close it when done.
func NewThrottler(ctx context.Context, src *sql.DB, opts plans.Options, creds dbutil.Creds) (*Throttler, error) {
	return throttle.New(ctx, src, throttle.Config{
		MaxRate:           opts.MaxRate,
		MaxThreadsRunning: opts.MaxThreadsRunning,
		MaxLag:            opts.MaxLagMS.D(),
		Replicas:          opts.Replicas,
		ControlFile:       opts.ControlFile,
	}, creds)
}
