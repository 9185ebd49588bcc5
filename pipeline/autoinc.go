package pipeline

// The AUTO_INCREMENT counter moves with the rows. Rows carry their ids, so
// the target's counter passes every id the copy and the tail wrote; but ids
// the source issued and then lost (the highest rows deleted, an insert
// rolled back) are not in any row, and a target that never saw them would
// hand them out again. Behind the fence no id can be issued on the serving
// side, so its counters read there are final: the other side's are raised
// to at least them before the shard map switches.
//
// The blackout pays for none of the lookups: which tables have a counter is
// read at planning (Plan.Counters), the ALTERs run ahead of each attempt,
// outside it, and behind the fence only the fenced side's counters are read,
// one SHOW CREATE TABLE per table with a counter (a cost that does not grow
// with the server's number of tables, unlike information_schema, which
// MariaDB answers by opening every table of the server for a join). An
// ALTER behind the fence is left for ids issued and lost in the moments
// between the raise ahead and the fence.

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// counterColumns lists the tables of schema with an AUTO_INCREMENT column,
// the column and its type's largest value. At planning only: it reads
// information_schema.
func counterColumns(ctx context.Context, db *sql.DB, schema string) (map[string]plans.Counter, error) {
	out := map[string]plans.Counter{}
	var tb, col, typ, full string
	err := dbutil.ScanEach(ctx, db, "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND EXTRA LIKE '%auto_increment%'",
		[]any{schema}, []any{&tb, &col, &typ, &full}, func() error {
			out[tb] = plans.Counter{Table: tb, Column: col, Max: typeMax(typ, strings.Contains(strings.ToLower(full), "unsigned"))}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read the AUTO_INCREMENT columns of %s: %w", schema, err)
	}
	return out, nil
}

// typeMax is the largest value of an integer column type (float columns:
// the largest integer a double holds exactly).
func typeMax(typ string, unsigned bool) uint64 {
	bits := map[string]uint{"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}[strings.ToLower(typ)]
	switch {
	case bits == 0:
		return 1 << 53
	case unsigned:
		return 1<<bits - 1
	}
	return 1<<(bits-1) - 1
}

// autoIncrementRe finds the counter among the table options: the line that
// closes the column list ("\n) ENGINE=… AUTO_INCREMENT=N …").
var autoIncrementRe = regexp.MustCompile(`(?:^| )AUTO_INCREMENT=(\d+)`)

// autoIncrements reads the live AUTO_INCREMENT counter of each of tables in
// schema (tables known to have an AUTO_INCREMENT column), a few at a time.
// SHOW CREATE TABLE asks the engine for the counter on both flavors (MySQL
// 8+ answers information_schema.TABLES from a cache) and opens only the
// table named; it omits a counter of 1 (nothing issued yet). A table
// missing on db is left out.
func autoIncrements(ctx context.Context, db *sql.DB, schema string, tables []string) (map[string]uint64, error) {
	out := map[string]uint64{}
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	next := make(chan string)
	for range min(4, len(tables)) {
		wg.Go(func() {
			for t := range next {
				n, ok, err := autoIncrement(ctx, db, schema, t)
				mu.Lock()
				switch {
				case err != nil && first == nil:
					first = fmt.Errorf("read the AUTO_INCREMENT counter of %s: %w", dbutil.Table(schema, t), err)
				case ok:
					out[t] = n
				}
				mu.Unlock()
			}
		})
	}
	for _, t := range tables {
		next <- t
	}
	close(next)
	wg.Wait()
	return out, first
}

// autoIncrement reads one table's counter; ok is false when it does not exist.
func autoIncrement(ctx context.Context, db *sql.DB, schema, table string) (n uint64, ok bool, err error) {
	var name, create string
	if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE "+dbutil.Table(schema, table)).Scan(&name, &create); err != nil {
		if dbutil.ErrNumber(err) == 1146 {
			return 0, false, nil
		}
		return 0, false, err
	}
	_, opts, found := strings.Cut(create, "\n) ")
	if !found {
		return 0, false, fmt.Errorf("no table options in SHOW CREATE TABLE")
	}
	opts, _, _ = strings.Cut(opts, "\n")
	m := autoIncrementRe.FindStringSubmatch(opts)
	if m == nil {
		return 1, true, nil
	}
	n, err = strconv.ParseUint(m[1], 10, 64)
	return n, err == nil, err
}

// carryAutoIncrement raises the AUTO_INCREMENT counter of each of tables in
// toSchema on to to at least the one in fromSchema on from, never lowering
// one (a merge's target keeps its own when higher). floor holds what to's
// counters are known to be at least (nil: nothing known): only tables whose
// counter on from passed it are read on to. It returns the tables it
// raised and the new floor. When from is fenced the counters it reads are
// final. A rerun finds the raised counters and does nothing, so the step
// that calls it stays idempotent. Each ALTER waits at most lockWait for
// the table's metadata lock.
func carryAutoIncrement(ctx context.Context, from *sql.DB, fromSchema string, to *sql.DB, toSchema string, tables []string, floor map[string]uint64, lockWait time.Duration) (raised []string, after map[string]uint64, err error) {
	after = maps.Clone(floor)
	if after == nil {
		after = map[string]uint64{}
	}
	if len(tables) == 0 {
		return nil, after, nil
	}
	want, err := autoIncrements(ctx, from, fromSchema, tables)
	if err != nil {
		return nil, nil, err
	}
	var check []string
	for _, t := range tables {
		if w, ok := want[t]; ok && w > after[t] {
			check = append(check, t)
		}
	}
	if len(check) == 0 {
		return nil, after, nil
	}
	have, err := autoIncrements(ctx, to, toSchema, check)
	if err != nil {
		return nil, nil, err
	}
	var raise []string
	for _, t := range check {
		if h, ok := have[t]; ok && h < want[t] {
			raise = append(raise, t)
		}
	}
	if len(raise) > 0 {
		if err := raiseCounters(ctx, to, toSchema, raise, want, lockWait); err != nil {
			return nil, nil, err
		}
	}
	for _, t := range check {
		after[t] = max(have[t], want[t])
	}
	return raise, after, nil
}

// raiseCounters runs ALTER TABLE … AUTO_INCREMENT = to[t] for each of ts in
// schema, each waiting at most lockWait for the table's metadata lock.
func raiseCounters(ctx context.Context, db *sql.DB, schema string, ts []string, to map[string]uint64, lockWait time.Duration) error {
	conn, err := chunk.Session(ctx, db, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", max(1, int(lockWait.Round(time.Second)/time.Second))))
	if err != nil {
		return fmt.Errorf("raise the AUTO_INCREMENT counters in %s: %w", schema, err)
	}
	defer chunk.Release(conn)
	for _, t := range ts {
		// The value is a number read from the server, not user input; ALTER
		// takes no placeholder for it.
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("ALTER TABLE %s AUTO_INCREMENT = %d", dbutil.Table(schema, t), to[t])); err != nil {
			return fmt.Errorf("table %s.%s: raise AUTO_INCREMENT to %d: %w", schema, t, to[t], err)
		}
	}
	return nil
}

// counterTables are those of ts with an AUTO_INCREMENT column (not on
// servers that interleave ids, which never issue each other's): the plan's
// record, or for a plan made before it was kept, read from the fenced side
// (ahead of a blackout, and kept for the run).
func (r *runner) counterTables(ctx context.Context, db *sql.DB, schema string, ts []tables.Table) ([]string, error) {
	r.mu.Lock()
	known := r.p.Counters
	r.mu.Unlock()
	if known == nil {
		cols, err := counterColumns(ctx, db, schema)
		if err != nil {
			return nil, err
		}
		known = slices.Collect(maps.Values(cols))
		r.mu.Lock()
		r.p.Counters = known
		r.mu.Unlock()
	}
	var out []string
	for _, t := range ts {
		if slices.ContainsFunc(known, func(c plans.Counter) bool { return c.Table == t.Name && !c.Interleaved }) {
			out = append(out, t.Name)
		}
	}
	return out, nil
}

// carryCutoverCounters carries the source's counters to the target at the
// cutover, ahead of the blackout or behind the fence. A key move carries
// none: both shards stay and keep their counters, so the source issues none
// of its ids again, and the target holds its counter past every row it was
// given (InnoDB) and, where ids can meet, past the source's since create
// (raiseTargetCounters). Carrying the whole counter across would only tie
// the two shards' counters together. (The reverse window's switches still
// carry: the side switched to must issue above what the other issued.)
func (r *runner) carryCutoverCounters(ctx context.Context, ahead bool) error {
	if keysMove(r.p) {
		return nil
	}
	return r.carryCounters(ctx, r.src, r.p.Source.Schema, r.dst, r.p.Target.Schema, r.p.Copy, ahead)
}

// carryCounters carries the counters of ts from the fenced side to the side
// the shard map is about to point at, and logs what it raised. ahead marks
// the raise outside the blackout, which reads both sides and notes what the
// other side's counters are at least; behind the fence only the fenced
// side's are read, and the other side's only where they passed that.
func (r *runner) carryCounters(ctx context.Context, from *sql.DB, fromSchema string, to *sql.DB, toSchema string, ts []tables.Table, ahead bool) error {
	names, err := r.counterTables(ctx, from, fromSchema, ts)
	if err != nil {
		return err
	}
	key := fmt.Sprintf("%p/%s", to, toSchema)
	r.mu.Lock()
	floor := r.floors[key]
	r.mu.Unlock()
	if ahead {
		floor = nil
	}
	start := time.Now()
	raised, after, err := carryAutoIncrement(ctx, from, fromSchema, to, toSchema, names, floor, r.p.Options.LockWaitMS.D())
	r.mu.Lock()
	if r.floors == nil {
		r.floors = map[string]map[string]uint64{}
	}
	r.floors[key] = after // nil after a failure: the next carry reads both sides
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if len(raised) > 0 {
		r.env.Log.Info("AUTO_INCREMENT counters carried", "schema", toSchema, "tables", raised, "took", time.Since(start))
	}
	return nil
}
