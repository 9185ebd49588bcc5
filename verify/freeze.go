package verify

// A table compared in one consistent snapshot per side. Under writes, a
// chunk compared on two live servers differs whenever a write lands on it
// while the binlog tail still carries it, and waits for a Settle and a
// re-check (walk.go); at a few hundred transactions a second most chunks of
// a table do. spirit's checksum and Vitess's VDiff compare at one point in
// the stream instead, and so does Freeze: the table is locked for reads on
// the source for a moment (LOCK TABLES … READ: writers wait, none fails),
// Freeze lets the target apply everything the source committed, every
// worker's sessions start a consistent snapshot on both sides, and the lock
// goes. The walk then compares two still images while the load and the
// tail go on, so a chunk that differs differs in fact. A table is frozen
// when a chunk of it first differs (walker.freeze): one nobody writes never
// pays for the lock and the catch-up (about 25 ms a table, measured on an
// idle move of the sandbox's 6 tables).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
)

// defaultFreezeFor bounds how long the source table stays locked while
// Freeze brings the target in step.
const defaultFreezeFor = 500 * time.Millisecond

// errNotFrozen wraps why a table is compared chunk by chunk after all.
var errNotFrozen = errors.New("not frozen")

// freeze starts a consistent snapshot on both sessions of every scope in
// scs, at a point where the target holds what the source does. It returns
// errNotFrozen (wrapped, with why) where it could not, having changed
// nothing: the caller compares chunk by chunk, with Settle and re-checks. Any
// other error is the run's. held is how long the table was locked.
func (v *Verifier) freeze(ctx context.Context, table string, scs []*scope) (held time.Duration, err error) {
	budget := v.FreezeFor
	if budget <= 0 {
		budget = defaultFreezeFor
	}
	// Only InnoDB keeps a snapshot: a MyISAM or MEMORY table is read as it
	// is at each statement, on both sides.
	for _, side := range []struct {
		name, schema string
		db           *sql.DB
	}{{"source", v.SourceSchema, v.Source}, {"target", v.TargetSchema, v.Target}} {
		var engine sql.NullString
		err := side.db.QueryRowContext(ctx, "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", side.schema, table).Scan(&engine)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("read the %s table's engine: %w", side.name, err)
		}
		if !strings.EqualFold(engine.String, "InnoDB") {
			return 0, fmt.Errorf("%w: the %s table's engine is %q, which keeps no consistent snapshot", errNotFrozen, side.name, engine.String)
		}
	}
	lock, err := chunk.Session(ctx, v.Source)
	if err != nil {
		return 0, fmt.Errorf("open the lock session: %w", err)
	}
	// Closing the session ends the lock, whatever happened.
	defer chunk.Release(lock)
	// A long transaction on the table holds the lock off, and writers queue
	// behind a waiting lock: the wait is cut at lock_wait_timeout's least,
	// 1 s. Not by KILL QUERY: on MariaDB a statement killed while it parses
	// the table's triggers leaves a broken table instance in the table
	// cache (fence/triggers.go's execDDL).
	if _, err := lock.ExecContext(ctx, "SET SESSION lock_wait_timeout = 1"); err != nil {
		return 0, err
	}
	if _, err := lock.ExecContext(ctx, "LOCK TABLES "+dbutil.Table(v.SourceSchema, table)+" READ"); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("%w: lock the source table for reads: %v", errNotFrozen, err)
	}
	start := time.Now()
	fctx, cancel := context.WithTimeout(ctx, budget)
	err = v.Freeze(fctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return time.Since(start), ctx.Err()
		}
		return time.Since(start), fmt.Errorf("%w: the target did not catch up within %s: %v", errNotFrozen, budget, err)
	}
	for _, sc := range scs {
		for _, c := range []struct {
			side string
			q    *sql.Conn
		}{{"source", sc.src}, {"target", sc.dst}} {
			// A server whose default isolation is READ COMMITTED would
			// otherwise take a fresh view per statement.
			for _, stmt := range []string{"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION WITH CONSISTENT SNAPSHOT"} {
				if _, err := c.q.ExecContext(ctx, stmt); err != nil {
					// Sessions already in a snapshot end it: the caller goes on chunk by chunk.
					unfreeze(scs)
					return time.Since(start), fmt.Errorf("%w: start a snapshot on the %s: %v", errNotFrozen, c.side, err)
				}
			}
		}
	}
	if _, err := lock.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		unfreeze(scs)
		return time.Since(start), fmt.Errorf("unlock the source table: %w", err)
	}
	return time.Since(start), nil
}

// unfreeze ends the snapshots of scs (errors ignored: a broken session fails
// its next check, which names it).
func unfreeze(scs []*scope) {
	for _, sc := range scs {
		_, _ = sc.src.ExecContext(context.Background(), "ROLLBACK")
		_, _ = sc.dst.ExecContext(context.Background(), "ROLLBACK")
	}
}
