package dbutil

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"
)

// DropSchema drops a schema, trying again a few times when the server could
// not remove its directory (error 1010): seen once in about 30 corpus moves
// on MariaDB 10.11, a <table>.TRG- file (the backup trigger DDL keeps while it
// runs) was still in the directory when DROP DATABASE tried to remove it.
// Such a backup can also stay for good (a CREATE TRIGGER under concurrent
// writes left one behind about once in 20 moves): before each retry, the
// backups of tables (the schema's tables, by name) are cleared.
func DropSchema(ctx context.Context, db *sql.DB, schema string, tables []string) error {
	var err, clearErr error
	for try := 0; try < 4; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(try) * 500 * time.Millisecond):
			}
			clearErr = clearTriggerBackups(ctx, db, schema, tables)
		}
		if _, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+QuoteIdent(schema)); ErrNumber(err) != 1010 {
			return err
		}
	}
	if clearErr != nil {
		err = fmt.Errorf("%w (clearing trigger backups: %v)", err, clearErr)
	}
	return fmt.Errorf("%w (files the server does not know are left in the schema's directory: remove them on the server, then resume)", err)
}

// clearTriggerBackups removes MariaDB's stale <table>.TRG- files from a
// schema whose DROP DATABASE failed on them (its tables are gone by then):
// a CREATE TRIGGER on a table that already has a trigger writes that
// backup again and deletes it, so each table gets a stand-in with two
// triggers, which the next DROP DATABASE takes along. Out of the binlog.
func clearTriggerBackups(ctx context.Context, db *sql.DB, schema string, tables []string) error {
	f, err := FlavorOf(ctx, db)
	if err != nil || f.MySQL { // MySQL keeps triggers in its data dictionary
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // sql_log_bin must not reach the pool
		_ = conn.Close()
	}()
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_log_bin = 0"); err != nil {
		return err
	}
	for i, t := range tables {
		tb := Table(schema, t)
		for j, q := range []string{
			"CREATE TABLE IF NOT EXISTS " + tb + " (id INT NOT NULL PRIMARY KEY)",
			fmt.Sprintf("CREATE TRIGGER IF NOT EXISTS %s BEFORE INSERT ON %s FOR EACH ROW SET @shardctl_clear = 1", Table(schema, fmt.Sprintf("shardctl_clear_%d_a", i)), tb),
			fmt.Sprintf("CREATE TRIGGER IF NOT EXISTS %s BEFORE UPDATE ON %s FOR EACH ROW SET @shardctl_clear = 1", Table(schema, fmt.Sprintf("shardctl_clear_%d_b", i)), tb),
		} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s (step %d): %w", t, j, err)
			}
		}
	}
	return nil
}
