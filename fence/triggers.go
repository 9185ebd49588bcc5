package fence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
)

// Table is one table to fence and the rows (by sharding key) the fence covers.
type Table struct {
	Name   string
	Filter keyspace.Filter
}

// Names are the tables' names.
func Names(ts []Table) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// IsTimeout reports a fence statement that gave up waiting for a table's
// metadata lock (a transaction on the table is still open).
func IsTimeout(err error) bool {
	if errors.Is(err, ErrBudget) {
		return true
	}
	return dbutil.ErrNumber(err) == 1205 || dbutil.IsStatementTimeout(err) // lock wait timeout, statement time limit
}

// ErrNumber is what a fenced write fails with: MySQL's ER_OPTION_PREVENTS_STATEMENT,
// the book's "read-only, look the shard up again" error.
const ErrNumber = 1290

const prefix = "shardctl_fence_"

// TriggerPrefix starts the name of every fence trigger (readers of a schema's
// own triggers leave these out).
const TriggerPrefix = prefix

// trigger names are at most 64 characters; the table part is cut to fit.
func triggerName(table, event string) string {
	t := table
	if len(t) > 64-len(prefix)-4 {
		t = t[:64-len(prefix)-4]
	}
	return prefix + t + "_" + event
}

// ddl returns the CREATE TRIGGER statements that fence t in schema.
func ddl(schema string, t Table) []string { return ddlWith(schema, t, "") }

// ddlWith returns t's fence triggers; with armed set (a condition), they
// fence only while it holds (armed.go).
func ddlWith(schema string, t Table, armed string) []string {
	cond := func(row string) string { return t.Filter.SQLLiteral(row + "." + dbutil.QuoteIdent(t.Filter.Column)) }
	if t.Filter.All() {
		cond = func(string) string { return "1=1" }
	}
	msg := fmt.Sprintf("shardctl: %s.%s is moving (writes fenced); look the shard up again", schema, t.Name)
	msg = strings.ReplaceAll(msg, "'", "")
	body := func(c string) string {
		signal := "SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1290, MESSAGE_TEXT = '" + msg + "';"
		if armed != "" {
			// The fence row is read (and locked) only for a row the fence covers.
			signal = "IF " + armed + " THEN " + signal + " END IF;"
		}
		return " FOR EACH ROW BEGIN IF " + BypassVar + " IS NULL AND (" + c + ") THEN " + signal + " END IF; END"
	}
	on := dbutil.Table(schema, t.Name)
	return []string{
		"CREATE TRIGGER IF NOT EXISTS " + dbutil.Table(schema, triggerName(t.Name, "bi")) + " BEFORE INSERT ON " + on + body(cond("NEW")),
		"CREATE TRIGGER IF NOT EXISTS " + dbutil.Table(schema, triggerName(t.Name, "bu")) + " BEFORE UPDATE ON " + on + body(cond("OLD")+" OR "+cond("NEW")),
		"CREATE TRIGGER IF NOT EXISTS " + dbutil.Table(schema, triggerName(t.Name, "bd")) + " BEFORE DELETE ON " + on + body(cond("OLD")),
	}
}

// Install fences every table. CREATE TRIGGER waits for the table's metadata
// lock, i.e. for transactions that already wrote to it; a short
// lock_wait_timeout keeps that wait from piling up other sessions behind it
// (gh-ost's lesson), and the caller retries. Once Install returns, no
// transaction that writes a fenced row can commit on the source. The triggers
// stay out of the binlog so the tail never sees them as DDL.
func Install(ctx context.Context, db *sql.DB, schema string, ts []Table, lockWait time.Duration) error {
	// Each table's triggers go in on their own connection, all tables at once:
	// every CREATE TRIGGER is a short DDL, and the blackout is their sum otherwise.
	// Every statement may wait only for what is left of lockWait, so the whole
	// install fits in it.
	deadline := time.Now().Add(lockWait)
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return fmt.Errorf("fence %s: %w", schema, err)
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	err = perTable(ctx, db, names, lockWait, func(conn *sql.Conn, i int) error {
		return installOne(ctx, f, conn, schema, ts[i], deadline)
	})
	if err != nil {
		return err
	}
	// Triggers of an armed fence already there (same names) fence with their row.
	if err := setRow(ctx, db, schema, 1, max(time.Until(deadline), 10*time.Millisecond)); err != nil {
		return fmt.Errorf("fence %s: %w", schema, err)
	}
	return nil
}

// installOne creates t's fence triggers on conn, each statement bounded by
// deadline.
func installOne(ctx context.Context, f dbutil.Flavor, conn *sql.Conn, schema string, t Table, deadline time.Time) error {
	return execAll(ctx, f, conn, schema, t.Name, ddl(schema, t), deadline)
}

// execAll runs stmts (table's fence DDL) on conn, each waiting for the
// table's metadata lock only until deadline (execDDL).
func execAll(ctx context.Context, f dbutil.Flavor, conn *sql.Conn, schema, table string, stmts []string, deadline time.Time) error {
	for _, stmt := range stmts {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("fence %s.%s: %w", schema, table, ErrBudget)
		}
		if err := execDDL(ctx, f, conn, stmt, left); err != nil {
			return fmt.Errorf("fence %s.%s: %w", schema, table, err)
		}
	}
	return nil
}

// execDDL runs stmt, a CREATE or DROP TRIGGER on an application table, on
// conn with its metadata-lock waits bounded by d (lock_wait_timeout, whole
// seconds, so a wait may overrun d by under a second) and no statement time
// limit: a statement interrupted (max_statement_time, KILL QUERY) while it
// opens the table and parses the table's triggers leaves that table instance
// in the table cache with an unparseable trigger, and every write that picks
// it up fails with error 1064 "Trigger ... has an error in its body" until it
// leaves the cache (MariaDB 10.11; TestInterruptedTriggerParse).
func execDDL(ctx context.Context, f dbutil.Flavor, conn *sql.Conn, stmt string, d time.Duration) error {
	secs := max(1, int(math.Ceil(d.Seconds())))
	if !f.MySQL {
		_, err := conn.ExecContext(ctx, fmt.Sprintf("SET STATEMENT max_statement_time = 0, lock_wait_timeout = %d FOR ", secs)+stmt)
		return err
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", secs)); err != nil {
		return err
	}
	_, err := conn.ExecContext(ctx, stmt)
	return err
}

// execBounded runs stmt on conn for at most d: MariaDB stops it itself;
// on MySQL another connection kills it (KILL QUERY) when d runs out.
// id caches conn's CONNECTION_ID() (0: not read yet). Only for statements on
// the fence table, which has no triggers (execDDL says why that matters).
func execBounded(ctx context.Context, db *sql.DB, f dbutil.Flavor, conn *sql.Conn, id *int64, stmt string, d time.Duration) error {
	if q, ok := f.BoundedStatement(stmt, d); ok {
		_, err := conn.ExecContext(ctx, q)
		return err
	}
	if *id == 0 {
		if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(id); err != nil {
			return err
		}
	}
	stop := dbutil.KillQueryAfter(db, *id, d)
	defer stop()
	_, err := conn.ExecContext(ctx, stmt)
	return err
}

// ErrBudget is returned when the fence could not be installed in the time it was given.
var ErrBudget = errors.New("the fence did not go in within its time budget")

// perTable runs fn for every table at once, each on its own fence session,
// and returns the first error.
func perTable(ctx context.Context, db *sql.DB, names []string, lockWait time.Duration, fn func(conn *sql.Conn, i int) error) error {
	errs := make(chan error, len(names))
	for i := range names {
		go func() {
			errs <- session(ctx, db, lockWait, func(conn *sql.Conn) error { return fn(conn, i) })
		}()
	}
	var first error
	for range names {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// session runs fn on a connection that keeps its statements out of the binlog
// and waits at most lockWait for a table's metadata lock.
func session(ctx context.Context, db *sql.DB, lockWait time.Duration, fn func(*sql.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer release(conn)
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return err
	}
	if err := setup(ctx, conn, f, lockWait); err != nil {
		return err
	}
	return fn(conn)
}

// release closes a fence session: its settings must not leak into the pool.
func release(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// setup prepares a fence session.
func setup(ctx context.Context, conn *sql.Conn, f dbutil.Flavor, lockWait time.Duration) error {
	secs := max(1, int(math.Ceil(lockWait.Seconds())))
	// No session time limit: trigger DDL must never be interrupted (execDDL);
	// statements on the fence table carry their own (execBounded).
	for _, s := range []string{"SET SESSION sql_log_bin = 0", fmt.Sprintf("SET SESSION lock_wait_timeout = %d", secs)} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// Remove drops the fence triggers of every table (idempotent).
func Remove(ctx context.Context, db *sql.DB, schema string, names []string, lockWait time.Duration) error {
	// Lifting the fence after a backed-off cutover is part of that attempt's blackout: all tables at once.
	// Only triggers that exist are dropped: MySQL waits for the table's
	// metadata lock even for DROP TRIGGER IF EXISTS of a missing trigger.
	f, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return fmt.Errorf("lift fence on %s: %w", schema, err)
	}
	// An armed fence lifts at once with its row; its triggers and table go after.
	if err := setRow(ctx, db, schema, 0, lockWait); err != nil {
		return fmt.Errorf("lift fence on %s: %w", schema, err)
	}
	present, err := Installed(ctx, db, schema)
	if err != nil {
		return fmt.Errorf("lift fence on %s: %w", schema, err)
	}
	have := map[string]bool{}
	for _, n := range present {
		have[n] = true
	}
	err = perTable(ctx, db, names, lockWait, func(conn *sql.Conn, i int) error {
		for _, ev := range []string{"bi", "bu", "bd"} {
			if !have[triggerName(names[i], ev)] {
				continue
			}
			if err := execDDL(ctx, f, conn, "DROP TRIGGER IF EXISTS "+dbutil.Table(schema, triggerName(names[i], ev)), lockWait); err != nil {
				return fmt.Errorf("lift fence on %s.%s: %w", schema, names[i], err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := dropTable(ctx, db, schema, lockWait); err != nil {
		return fmt.Errorf("lift fence on %s: drop %s: %w", schema, FenceTable, err)
	}
	return nil
}

// Installed lists the fence triggers present in schema.
func Installed(ctx context.Context, db *sql.DB, schema string) ([]string, error) {
	var out []string
	var n string
	if err := dbutil.ScanEach(ctx, db, "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND TRIGGER_NAME LIKE 'shardctl\\_fence\\_%' ORDER BY TRIGGER_NAME",
		[]any{schema}, []any{&n}, func() error { out = append(out, n); return nil }); err != nil {
		return nil, err
	}
	return out, nil
}
