package schemaobj

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
)

// Exists reports whether schema on db has an object of o's kind and name.
func Exists(ctx context.Context, db *sql.DB, schema string, o Object) (bool, error) {
	var q string
	switch o.Kind {
	case Function, Procedure:
		q = "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ? AND ROUTINE_NAME = ? AND ROUTINE_TYPE = '" + o.Kind + "'"
	case View:
		q = "SELECT COUNT(*) FROM information_schema.VIEWS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?"
	case Trigger:
		q = "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND TRIGGER_NAME = ?"
	case Event:
		q = "SELECT COUNT(*) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = ? AND EVENT_NAME = ?"
	default:
		return false, fmt.Errorf("unknown object kind %q", o.Kind)
	}
	var n int
	err := db.QueryRowContext(ctx, q, schema, o.Name).Scan(&n)
	return n > 0, err
}

// Create creates objs (read from schema from) in schema on db, with their
// definers and session settings: functions, procedures and views as they
// are, triggers guarded (they do not fire on shardctl's own writes), events
// disabled. An object that exists already is left as it is (a resumed
// create, or a merge into a schema that has it). It returns what it did,
// one line per object.
func Create(ctx context.Context, db *sql.DB, schema, from string, objs []Object) ([]string, error) {
	var did []string
	pending := objs
	// A view can read another view: one that fails for a missing table is
	// tried again once the others exist (information_schema lists views by
	// name, not by dependency).
	for len(pending) > 0 {
		var retry []Object
		var lastErr error
		for _, o := range pending {
			line, err := create(ctx, db, schema, from, o)
			if err != nil && o.Kind == View && dbutil.ErrNumber(err) == 1146 {
				retry, lastErr = append(retry, o), err
				continue
			}
			if err != nil {
				return did, err
			}
			did = append(did, line)
		}
		if len(retry) == len(pending) {
			return did, lastErr
		}
		pending = retry
	}
	return did, nil
}

func create(ctx context.Context, db *sql.DB, schema, from string, o Object) (string, error) {
	ok, err := Exists(ctx, db, schema, o)
	if err != nil {
		return "", fmt.Errorf("create %s in %s: %w", o, schema, err)
	}
	if ok {
		return o.String() + ": exists, left as it is", nil
	}
	def := o.Create
	switch o.Kind {
	case Trigger:
		if def, err = o.Guarded(); err != nil {
			return "", err
		}
	case Event:
		def = o.Disabled()
	}
	if err := run(ctx, db, schema, o, Rename(def, from, schema)); err != nil {
		return "", fmt.Errorf("create %s in %s: %w", o, schema, err)
	}
	return o.String() + ": created", nil
}

// Finish makes the objects Create made exact: each trigger's own definition
// replaces its guarded one (atomically), and events that were enabled on the
// source are enabled. Run it once the schema owns its rows (after cutover).
func Finish(ctx context.Context, db *sql.DB, schema, from string, objs []Object) error {
	var trig []Object
	for _, o := range objs {
		switch o.Kind {
		case Trigger:
			trig = append(trig, o)
		case Event:
			if o.Enabled {
				if _, err := db.ExecContext(ctx, "ALTER EVENT "+dbutil.Table(schema, o.Name)+" ENABLE"); err != nil {
					return fmt.Errorf("enable %s in %s: %w", o, schema, err)
				}
			}
		}
	}
	return Replace(ctx, db, schema, from, trig, false)
}

// Replace re-creates triggers (in the order given, which is their firing
// order) from their definitions, guarded or exact, each replacing the one of
// the same name atomically.
func Replace(ctx context.Context, db *sql.DB, schema, from string, trig []Object, guarded bool) error {
	if len(trig) == 0 {
		return nil
	}
	maria, err := IsMariaDB(ctx, db)
	if err != nil {
		return err
	}
	for _, o := range trig {
		def := o.Exact()
		if guarded {
			if def, err = o.Guarded(); err != nil {
				return err
			}
		}
		if err := run(ctx, db, schema, o, replaceTrigger(maria, schema, o, Rename(def, from, schema))...); err != nil {
			return fmt.Errorf("replace %s in %s: %w", o, schema, err)
		}
	}
	return nil
}

// Drop removes objs from schema (an aborted merge takes back what it
// created in the live target).
func Drop(ctx context.Context, db *sql.DB, schema string, objs []Object) error {
	for _, o := range objs {
		if _, err := db.ExecContext(ctx, "DROP "+o.Kind+" IF EXISTS "+dbutil.Table(schema, o.Name)); err != nil {
			return fmt.Errorf("drop %s in %s: %w", o, schema, err)
		}
	}
	return nil
}

// MissingDefiners lists the definers of objs that have no account on db, so
// creating the objects there would fail or leave them unusable. It returns
// nothing when the account may not read mysql.user (it cannot tell).
func MissingDefiners(ctx context.Context, db *sql.DB, objs []Object) []string {
	seen := map[string]bool{}
	var out []string
	for _, o := range objs {
		user, host, ok := splitDefiner(o.Definer)
		if !ok || seen[o.Definer] {
			continue
		}
		seen[o.Definer] = true
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM mysql.user WHERE User = ? AND Host = ?", user, host).Scan(&n); err != nil {
			return nil
		}
		if n == 0 {
			out = append(out, o.Definer)
		}
	}
	return out
}

// splitDefiner parses `user`@`host` (or 'user'@'host').
func splitDefiner(d string) (user, host string, ok bool) {
	if len(d) < 5 {
		return "", "", false
	}
	q := d[0]
	if q != '`' && q != '\'' {
		return "", "", false
	}
	sep := string(q) + "@" + string(q)
	i := strings.Index(d, sep)
	if i < 0 || d[len(d)-1] != q {
		return "", "", false
	}
	unq := func(s string) string { return strings.ReplaceAll(s, string(q)+string(q), string(q)) }
	return unq(d[1:i]), unq(d[i+len(sep) : len(d)-1]), true
}

// IsMariaDB tells the server flavors apart where their SQL differs.
func IsMariaDB(ctx context.Context, db *sql.DB) (bool, error) {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return false, err
	}
	return strings.Contains(strings.ToLower(v), "mariadb"), nil
}

// replaceTrigger is the flavor's way to swap a trigger's definition with no
// moment where the table has no trigger: MariaDB has CREATE OR REPLACE
// TRIGGER; MySQL holds the table's write lock across DROP and CREATE.
func replaceTrigger(maria bool, schema string, o Object, def string) []string {
	if maria {
		return []string{"CREATE OR REPLACE " + strings.TrimPrefix(strings.TrimLeft(def, " \t\r\n"), "CREATE ")}
	}
	return []string{
		"LOCK TABLES " + dbutil.QuoteIdent(o.Table) + " WRITE",
		"DROP TRIGGER IF EXISTS " + dbutil.Table(schema, o.Name),
		def,
		"UNLOCK TABLES",
	}
}

// run executes statements for o in schema on a session with o's settings:
// its body is parsed under the sql_mode and character set it was written for.
//
// Each try waits at most lockWait for a table's metadata lock (a DDL that
// waits longer queues every later query on the table behind it: gh-ost's
// cutover lesson) and is repeated, with a pause, while an open transaction
// holds the table; the statements are idempotent (CREATE OR REPLACE, or a
// CREATE that did not happen).
func run(ctx context.Context, db *sql.DB, schema string, o Object, stmts ...string) error {
	var err error
	for try := 0; try < lockTries; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(try) * 200 * time.Millisecond):
			}
		}
		if err = runOnce(ctx, db, schema, o, stmts...); !dbutil.IsRetryableLockErr(err) {
			return err
		}
	}
	return fmt.Errorf("a transaction kept the table locked through %d tries: %w", lockTries, err)
}

const (
	lockWait  = "1" // lock_wait_timeout, seconds
	lockTries = 8
)

func runOnce(ctx context.Context, db *sql.DB, schema string, o Object, stmts ...string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // its settings are not the pool's
		_ = conn.Close()
	}()
	setup := []string{"USE " + dbutil.QuoteIdent(schema), "SET SESSION lock_wait_timeout = " + lockWait, "SET SESSION sql_mode = " + quote(o.SQLMode)}
	if o.Charset != "" {
		setup = append(setup, "SET SESSION character_set_client = "+quote(o.Charset))
	}
	if o.Collation != "" {
		setup = append(setup, "SET SESSION collation_connection = "+quote(o.Collation))
	}
	if o.TimeZone != "" {
		setup = append(setup, "SET SESSION time_zone = "+quote(o.TimeZone))
	}
	for _, q := range append(setup, stmts...) {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", shorten(q), err)
		}
	}
	return nil
}

// quote makes a string literal of a server-provided setting.
func quote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}

func shorten(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 100 {
		q = q[:97] + "..."
	}
	return q
}
