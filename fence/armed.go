package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/fault"
)

// The armed fence: the cutover creates its triggers before the blackout,
// and they fence only while the one row of FenceTable (in the fenced schema)
// says so, so fencing inside the blackout is one UPDATE instead of a
// CREATE TRIGGER (a metadata-lock wait) per table and event.
//
// The triggers read the row with a locking read: a transaction that wrote a
// moving row holds a shared lock on it, so the fencing UPDATE waits for that
// transaction exactly as CREATE TRIGGER's metadata lock did (a consistent
// read would let a REPEATABLE READ snapshot see the row unfenced). Creating
// the triggers waits for open writers too, so none that wrote before they
// existed is open when the UPDATE runs.

// FenceTable is the one-row table armed fence triggers read; listings of a
// shard's tables leave it out.
const FenceTable = dbutil.FenceTable

// Arm creates the armed fence triggers of ts that are missing (each
// table's at once, within lockWait), after the fence table with its row
// cleared: arming lifts a fence the row still held (a crash inside a
// blackout), which only the cutover's own next attempt does.
func (s *Sessions) Arm(ctx context.Context, schema string, ts []Table, lockWait time.Duration) error {
	if len(ts) == 0 {
		return nil
	}
	if len(ts) > len(s.conns) {
		return errors.New("fence: fewer sessions than tables")
	}
	deadline := time.Now().Add(lockWait)
	ft := dbutil.Table(schema, FenceTable)
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS " + ft + " (id TINYINT NOT NULL PRIMARY KEY, fenced TINYINT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO " + ft + " (id, fenced) VALUES (1, 0) ON DUPLICATE KEY UPDATE fenced = 0",
	} {
		if err := execBounded(ctx, s.db, s.f, s.conns[0], &s.ids[0], q, time.Until(deadline)); err != nil {
			return fmt.Errorf("arm the fence of %s: %w", schema, err)
		}
	}
	present, err := Installed(ctx, s.db, schema)
	if err != nil {
		return fmt.Errorf("arm the fence of %s: %w", schema, err)
	}
	have := map[string]bool{}
	for _, n := range present {
		have[n] = true
	}
	errs := make(chan error, len(ts))
	for i := range ts {
		go func() {
			var todo []string
			for _, q := range armedDDL(schema, ts[i]) {
				if !have[q.name] {
					todo = append(todo, q.stmt)
				}
			}
			errs <- execAll(ctx, s.f, s.conns[i], schema, ts[i].Name, todo, deadline)
		}()
	}
	var first error
	for range ts {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Fence sets the fence row (within lockWait): once it returns, no
// transaction that writes a row the armed triggers cover can commit.
func (s *Sessions) Fence(ctx context.Context, schema string, lockWait time.Duration) error {
	if len(s.conns) == 0 {
		return nil // nothing to fence
	}
	if err := execBounded(ctx, s.db, s.f, s.conns[0], &s.ids[0], "UPDATE "+dbutil.Table(schema, FenceTable)+" SET fenced = 1 WHERE id = 1", lockWait); err != nil {
		return fmt.Errorf("fence %s: %w", schema, err)
	}
	fault.Hit("fence:installed") // tests: crash or hold with the fence in place
	return nil
}

// armed is one armed trigger: its name and its CREATE statement.
type armed struct{ name, stmt string }

// armedDDL returns the CREATE TRIGGER statements of t's armed fence.
func armedDDL(schema string, t Table) []armed {
	read := "(SELECT fenced FROM " + dbutil.Table(schema, FenceTable) + " WHERE id = 1 LOCK IN SHARE MODE) = 1"
	ss := ddlWith(schema, t, read)
	return []armed{{triggerName(t.Name, "bi"), ss[0]}, {triggerName(t.Name, "bu"), ss[1]}, {triggerName(t.Name, "bd"), ss[2]}}
}

// setRow sets the fence row where there is one: 0 lifts an armed fence at
// once (its triggers are dropped after), 1 makes sure triggers found armed
// fence.
func setRow(ctx context.Context, db *sql.DB, schema string, fenced int, lockWait time.Duration) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, FenceTable).Scan(&n); err != nil || n == 0 {
		return err
	}
	return execOnce(ctx, db, fmt.Sprintf("UPDATE %s SET fenced = %d WHERE id = 1", dbutil.Table(schema, FenceTable), fenced), lockWait)
}

// dropTable drops the fence table once no fence trigger is left in schema.
func dropTable(ctx context.Context, db *sql.DB, schema string, lockWait time.Duration) error {
	left, err := Installed(ctx, db, schema)
	if err != nil || len(left) > 0 {
		return err
	}
	return execOnce(ctx, db, "DROP TABLE IF EXISTS "+dbutil.Table(schema, FenceTable), lockWait)
}

// execOnce runs stmt on a fence session of its own, bounded by lockWait.
func execOnce(ctx context.Context, db *sql.DB, stmt string, lockWait time.Duration) error {
	return session(ctx, db, lockWait, func(conn *sql.Conn) error {
		f, err := dbutil.FlavorOf(ctx, db)
		if err != nil {
			return err
		}
		var id int64
		return execBounded(ctx, db, f, conn, &id, stmt, lockWait)
	})
}

// FencedSchemas is Fences for every schema on db's server at once: the
// schemas whose table is fenced now. One statement reads the server's fence
// triggers; only a schema that has some is looked at again (its fence row),
// so a server of a thousand shard schemas costs one statement, not a
// thousand.
func FencedSchemas(ctx context.Context, db *sql.DB, table string) (map[string]bool, error) {
	var schemas []string
	var schema string
	if err := dbutil.ScanEach(ctx, db, "SELECT DISTINCT TRIGGER_SCHEMA FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_TABLE = ? AND TRIGGER_NAME LIKE 'shardctl\\_fence\\_%'",
		[]any{table}, []any{&schema}, func() error { schemas = append(schemas, schema); return nil }); err != nil {
		return nil, fmt.Errorf("list the fence triggers on table %s: %w", table, err)
	}
	out := map[string]bool{}
	for _, sc := range schemas {
		fenced, err := Fences(ctx, db, sc, table)
		if err != nil {
			return nil, fmt.Errorf("the fence of %s: %w", dbutil.Table(sc, table), err)
		}
		if fenced {
			out[sc] = true
		}
	}
	return out, nil
}

// Fences reports whether table in schema is fenced now: a plain fence
// trigger fences; armed ones (their bodies read FenceTable) fence only
// while the fence row is set, so an armed, unfenced table is not fenced.
func Fences(ctx context.Context, db *sql.DB, schema, table string) (bool, error) {
	var n, plain int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(LOCATE(?, ACTION_STATEMENT) = 0), 0) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? AND TRIGGER_NAME LIKE 'shardctl\\_fence\\_%'",
		FenceTable, schema, table).Scan(&n, &plain); err != nil || n == 0 || plain > 0 {
		return err == nil && n > 0, err
	}
	var fenced int
	err := db.QueryRowContext(ctx, "SELECT fenced FROM "+dbutil.Table(schema, FenceTable)+" WHERE id = 1").Scan(&fenced)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil // no row: the triggers let every write through
	case dbutil.ErrNumber(err) == 1146:
		return true, nil // no table: covered writes fail (never left so: Arm creates it first, Remove drops it last)
	}
	return fenced == 1, err
}
