package pipeline

// The AUTO_INCREMENT counter moves with the rows. Rows carry their ids, so
// the target's counter passes every id the copy and the tail wrote; but ids
// the source issued and then lost (the highest rows deleted, an insert
// rolled back) are not in any row, and a target that never saw them would
// hand them out again. Behind the fence no id can be issued on the serving
// side, so its counters read there are final: the other side's are raised
// to at least them before the shard map switches.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/tables"
)

// autoIncrements reads the live AUTO_INCREMENT counter of each of tables in
// schema that has one. MySQL 8+ answers information_schema.TABLES from a
// cache kept for information_schema_stats_expiry (a day by default), so its
// session sets that to 0 to ask the engine; MariaDB always asks the engine.
func autoIncrements(ctx context.Context, db *sql.DB, schema string, tables []string) (map[string]uint64, error) {
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the AUTO_INCREMENT counters of %s: %w", schema, err)
	}
	defer conn.Close()
	if f.MySQL {
		if _, err := conn.ExecContext(ctx, "SET SESSION information_schema_stats_expiry = 0"); err != nil {
			chunk.Release(conn)
			return nil, fmt.Errorf("read the AUTO_INCREMENT counters of %s: %w", schema, err)
		}
		// The connection goes back to the pool (a new one costs a TLS
		// handshake inside the blackout) with the setting undone, or is dropped.
		defer func() {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION information_schema_stats_expiry = DEFAULT"); err != nil {
				chunk.Release(conn)
			}
		}()
	}
	// Only the tables asked about: MySQL opens each one it reports on.
	args := []any{schema}
	for _, t := range tables {
		args = append(args, t)
	}
	// Only tables with an AUTO_INCREMENT column: MySQL 9 reports a counter
	// (1) for a MyISAM table without one too.
	rows, err := conn.QueryContext(ctx, `SELECT t.TABLE_NAME, t.AUTO_INCREMENT FROM information_schema.TABLES t
		WHERE t.TABLE_SCHEMA = ? AND t.TABLE_TYPE = 'BASE TABLE' AND t.AUTO_INCREMENT IS NOT NULL AND t.TABLE_NAME IN (`+dbutil.Placeholders(len(tables))+`)
		AND EXISTS (SELECT 1 FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME AND c.EXTRA LIKE '%auto_increment%')`, args...)
	if err != nil {
		return nil, fmt.Errorf("read the AUTO_INCREMENT counters of %s: %w", schema, err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var name string
		var n uint64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, fmt.Errorf("read the AUTO_INCREMENT counters of %s: %w", schema, err)
		}
		out[name] = n
	}
	return out, rows.Err()
}

// carryAutoIncrement raises the AUTO_INCREMENT counter of each of tables in
// toSchema on to to at least the one in fromSchema on from, never lowering
// one (a merge's target keeps its own when higher), and returns the tables
// it raised and those that have a counter on from. from must be fenced: then the counters it reads are final. A
// rerun after a crash finds the raised counters and does nothing, so the
// step that calls it stays idempotent. Each ALTER waits at most lockWait
// for the table's metadata lock.
func carryAutoIncrement(ctx context.Context, from *sql.DB, fromSchema string, to *sql.DB, toSchema string, tables []string, lockWait time.Duration) (raised, counted []string, err error) {
	if len(tables) == 0 {
		return nil, []string{}, nil
	}
	// Both sides at once: behind the fence this is blackout time.
	var want map[string]uint64
	var werr error
	var wg sync.WaitGroup
	wg.Go(func() { want, werr = autoIncrements(ctx, from, fromSchema, tables) })
	have, err := autoIncrements(ctx, to, toSchema, tables)
	wg.Wait()
	if err = errors.Join(werr, err); err != nil {
		return nil, nil, err
	}
	counted = []string{}
	var raise []string
	for _, t := range tables {
		w, ok := want[t]
		if ok {
			counted = append(counted, t)
		}
		if ok && have[t] < w {
			raise = append(raise, t)
		}
	}
	if len(raise) == 0 {
		return nil, counted, nil
	}
	conn, err := chunk.Session(ctx, to, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", max(1, int(lockWait.Round(time.Second)/time.Second))))
	if err != nil {
		return nil, nil, fmt.Errorf("raise the AUTO_INCREMENT counters in %s: %w", toSchema, err)
	}
	defer chunk.Release(conn)
	for _, t := range raise {
		// The value is a number read from the server, not user input; ALTER
		// takes no placeholder for it.
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("ALTER TABLE %s AUTO_INCREMENT = %d", dbutil.Table(toSchema, t), want[t])); err != nil {
			return nil, nil, fmt.Errorf("table %s.%s: raise AUTO_INCREMENT from %d to %d: %w", toSchema, t, have[t], want[t], err)
		}
	}
	return raise, counted, nil
}

// carryCounters carries the counters of ts from the fenced side to the side
// the shard map is about to point at, and logs what it raised. ahead marks
// the first raise, outside the blackout: it notes which tables have
// counters, so the raise behind the fence reads only those, and nothing at
// all when none has one.
func (r *runner) carryCounters(ctx context.Context, from *sql.DB, fromSchema string, to *sql.DB, toSchema string, ts []tables.Table, ahead bool) error {
	r.mu.Lock()
	known := r.counted
	r.mu.Unlock()
	var names []string
	for _, t := range ts {
		if ahead || known == nil || slices.Contains(known, t.Name) {
			names = append(names, t.Name)
		}
	}
	start := time.Now()
	raised, counted, err := carryAutoIncrement(ctx, from, fromSchema, to, toSchema, names, r.p.Options.LockWaitMS.D())
	if ahead {
		r.mu.Lock()
		r.counted = counted // nil after a failure: the raise behind the fence reads every table
		r.mu.Unlock()
	}
	if err != nil {
		return err
	}
	if len(raised) > 0 {
		r.env.Log.Info("AUTO_INCREMENT counters carried", "schema", toSchema, "tables", raised, "took", time.Since(start))
	}
	return nil
}
