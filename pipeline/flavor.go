package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/internal/fault"
)

// gtidWait is how long a resume on a promoted replica waits for it to hold
// every transaction the target already applied.
var gtidWait = 30 * time.Second

// sourceMoved reports whether from was recorded on another server than the
// source now is (a failover to a promoted replica). Then the tail resumes
// from from's GTID set, and only once the new source holds all of it: the
// target may have applied transactions an asynchronous replica never
// received, and resuming then would keep rows the source no longer has.
func (r *runner) sourceMoved(ctx context.Context, from binlog.Position) (bool, error) {
	if from.Server == "" {
		return false, nil
	}
	id, err := binlog.ServerIdentity(ctx, r.src)
	if err != nil {
		return false, err
	}
	if id == from.Server {
		return false, nil
	}
	if from.GTID == "" {
		return true, fmt.Errorf("%w: %w", ErrRefused, binlog.ErrNoGTID)
	}
	if err := awaitGTID(ctx, r.src, r.p.Source.Addr(), from.GTID, r.p.ID); err != nil {
		return true, err
	}
	r.env.Log.Info("resuming the binlog tail on another server by GTID", "source", r.p.Source.Addr(), "gtid", from.GTID)
	return true, nil
}

// awaitGTID waits up to gtidWait for the server at addr to hold every
// transaction of want (a checkpoint's GTID set), and refuses when it does
// not: the target may have applied transactions an asynchronous replica
// never received, and a server that is no replica of the source at all holds
// none of them.
func awaitGTID(ctx context.Context, db *sql.DB, addr, want, planID string) error {
	wait := gtidWait
	if fault.On("short:gtid-wait") {
		wait = time.Second // tests of the refusal
	}
	deadline := time.Now().Add(wait)
	for {
		flavor, have, err := binlog.HeldGTIDs(ctx, db)
		if err != nil {
			return fmt.Errorf("the source %s: %w", addr, err)
		}
		ok, err := binlog.GTIDContains(flavor, have, want)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the source %s (a promoted replica?) lacks transactions the target already applied (it has %s, the checkpoint needs %s): wait until it has them, or abort the plan ('shardctl plan abort %s') and start again",
				ErrRefused, addr, have, want, planID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
