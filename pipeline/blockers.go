package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
)

// A cutover attempt that cannot take its locks within the budget names the
// sessions that held them (gh-ost #687's lesson: a lock wait with nobody
// named leaves the operator guessing), and --kill-blockers (spirit's
// --force-kill) ends the old ones before the next attempt.
//
// Where the server says who holds a table's metadata lock, the list is
// exact: performance_schema.metadata_locks (MySQL by default; MariaDB with
// performance_schema on) or MariaDB's METADATA_LOCK_INFO plugin. Otherwise
// it falls back to the processlist's open transactions (INNODB_TRX): any of
// them may hold the table, and which ones do the server does not say.

// blocker is a session found holding (or, in the fallback, possibly
// holding) a lock on a fenced table.
type blocker struct {
	plans.Blocker
	writes bool   // it modified rows or holds row locks
	db     string // the session's default schema
}

// blockerQueries are the sources, most exact first; each selects id,
// user@host, age in milliseconds (of its transaction, else of its statement),
// statement, table, lock type, whether it writes and its default schema, for the schema and the
// tables given as its arguments.
const (
	fromMetadataLocks = `SELECT t.PROCESSLIST_ID, CONCAT(COALESCE(t.PROCESSLIST_USER, ''), '@', COALESCE(t.PROCESSLIST_HOST, '')),
		COALESCE(TIMESTAMPDIFF(MICROSECOND, x.trx_started, NOW(6)) DIV 1000, t.PROCESSLIST_TIME * 1000, 0), COALESCE(t.PROCESSLIST_INFO, ''),
		m.OBJECT_NAME, m.LOCK_TYPE, COALESCE(x.trx_rows_modified > 0 OR x.trx_lock_structs > 0, 0), COALESCE(t.PROCESSLIST_DB, '')
		FROM performance_schema.metadata_locks m
		JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID
		LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = t.PROCESSLIST_ID
		WHERE m.OBJECT_TYPE = 'TABLE' AND m.LOCK_STATUS = 'GRANTED' AND t.PROCESSLIST_ID IS NOT NULL
		AND t.PROCESSLIST_ID <> CONNECTION_ID() AND m.OBJECT_SCHEMA = ? AND m.OBJECT_NAME IN `
	fromLockInfo = `SELECT p.ID, CONCAT(p.USER, '@', p.HOST), COALESCE(TIMESTAMPDIFF(MICROSECOND, x.trx_started, NOW(6)) DIV 1000, p.TIME * 1000, 0),
		COALESCE(p.INFO, ''), m.TABLE_NAME, m.LOCK_MODE, COALESCE(x.trx_rows_modified > 0 OR x.trx_lock_structs > 0, 0), COALESCE(p.DB, '')
		FROM information_schema.METADATA_LOCK_INFO m
		JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID
		LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = p.ID
		WHERE p.ID <> CONNECTION_ID() AND m.TABLE_SCHEMA = ? AND m.TABLE_NAME IN `
	fromOpenTransactions = `SELECT p.ID, CONCAT(p.USER, '@', p.HOST), TIMESTAMPDIFF(MICROSECOND, x.trx_started, NOW(6)) DIV 1000,
		COALESCE(p.INFO, ''), '', '', x.trx_rows_modified > 0 OR x.trx_lock_structs > 0, COALESCE(p.DB, '')
		FROM information_schema.INNODB_TRX x
		JOIN information_schema.PROCESSLIST p ON p.ID = x.trx_mysql_thread_id
		WHERE p.ID <> CONNECTION_ID() ORDER BY x.trx_started`
)

// Sources of a blocker list, as Blocker.Source names them.
const (
	srcMetadataLocks = "metadata_locks"
	srcLockInfo      = "metadata_lock_info"
	srcOpenTrx       = "innodb_trx"
)

// findBlockers lists the sessions on db that hold a lock on one of tables in
// schema, at least minAge old, oldest first where the server says.
func findBlockers(ctx context.Context, db *sql.DB, schema string, tables []string, minAge time.Duration) ([]blocker, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	src, err := blockerSource(ctx, db)
	if err != nil {
		return nil, err
	}
	in := "(" + dbutil.Placeholders(len(tables)) + ")"
	args := []any{schema}
	for _, t := range tables {
		args = append(args, t)
	}
	var q string
	switch src {
	case srcMetadataLocks:
		q = fromMetadataLocks + in
	case srcLockInfo:
		q = fromLockInfo + in
	default:
		q, args = fromOpenTransactions, nil
	}
	var out []blocker
	at := map[int64]int{}
	var b blocker
	var writes int64
	err = dbutil.ScanEach(ctx, db, q, args, []any{&b.ID, &b.User, &b.AgeMS, &b.Statement, &b.Table, &b.Lock, &writes, &b.db}, func() error {
		if time.Duration(b.AgeMS)*time.Millisecond < minAge {
			return nil
		}
		b.Source, b.writes = src, writes != 0
		if i, ok := at[b.ID]; ok { // one session, several tables
			out[i].Table += ", " + b.Table
			return nil
		}
		at[b.ID] = len(out)
		out = append(out, b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the sessions holding locks on %s (%s): %w", schema, src, err)
	}
	return out, nil
}

// blockerSource picks the most exact source the server offers.
func blockerSource(ctx context.Context, db *sql.DB) (string, error) {
	var ps, instrumented int
	err := db.QueryRowContext(ctx, `SELECT @@performance_schema, (SELECT COUNT(*) FROM performance_schema.setup_instruments
		WHERE NAME = 'wait/lock/metadata/sql/mdl' AND ENABLED = 'YES')`).Scan(&ps, &instrumented)
	if err == nil && ps == 1 && instrumented == 1 {
		return srcMetadataLocks, nil
	}
	if err != nil && !dbutil.IsPrivilegeErr(err) {
		return "", fmt.Errorf("read @@performance_schema: %w", err)
	}
	var plugin int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = 'information_schema' AND TABLE_NAME = 'METADATA_LOCK_INFO'`).Scan(&plugin); err != nil {
		return "", fmt.Errorf("look for METADATA_LOCK_INFO: %w", err)
	}
	if plugin > 0 {
		return srcLockInfo, nil
	}
	return srcOpenTrx, nil
}

// reportBlockers lists what held the fenced tables for an attempt's record;
// a failure to list is logged, not fatal: the attempt's own result stands.
// Only sessions older than most of the budget are listed: one that began
// while the attempt waited cannot have held it up (in the processlist
// fallback, those are writers queued behind the fence's own lock request).
func (r *runner) reportBlockers(ctx context.Context, db *sql.DB, schema string, tables []string) []plans.Blocker {
	bs, err := findBlockers(ctx, db, schema, tables, r.p.Options.MaxBlackoutMS.D()*9/10)
	if err != nil {
		r.env.Log.Warn("naming the blocking sessions", "err", err)
		return nil
	}
	out := make([]plans.Blocker, len(bs))
	for i, b := range bs {
		out[i] = b.Blocker
	}
	return out
}

// killBlockers ends the sessions that have held a lock on a fenced table
// for at least age (--kill-blockers), before an attempt, and returns them
// as killed (or why not). Where the server cannot say which tables a
// session holds (the processlist fallback), only transactions that wrote or
// hold row locks from a session whose default schema is the fenced one are
// ended: never a reader, never a session working in another schema (another
// shard on the same server).
func killBlockers(ctx context.Context, db *sql.DB, schema string, tables []string, age time.Duration) ([]plans.Blocker, error) {
	bs, err := findBlockers(ctx, db, schema, tables, age)
	if err != nil {
		return nil, err
	}
	var out []plans.Blocker
	for _, b := range bs {
		if b.Source == srcOpenTrx && (!b.writes || b.db != schema) {
			continue
		}
		// The id is the server's own number, not input: KILL takes no placeholder.
		if _, err := db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(b.ID, 10)); err != nil {
			if dbutil.ErrNumber(err) != 1094 { // 1094: no such thread (it ended meanwhile)
				b.Note = err.Error()
			}
		} else {
			b.Killed = true
		}
		out = append(out, b.Blocker)
	}
	return out, nil
}

// killBefore is the fence step's --kill-blockers: before an attempt that
// follows another, it ends the sessions that have held a fenced table
// longer than the option's age and records them on the last attempt. A
// failure to list or kill is logged: the attempt goes on and may back off.
func (r *runner) killBefore(db *sql.DB, schema string, tables []string) func(context.Context) {
	age := r.p.Options.KillBlockersMS.D()
	if age <= 0 {
		return nil
	}
	return func(ctx context.Context) {
		killed, err := killBlockers(ctx, db, schema, tables, age)
		if err != nil {
			r.env.Log.Warn("--kill-blockers", "err", err)
			return
		}
		r.recordKills(killed)
	}
}

// recordKills adds killed sessions to the last attempt's blockers.
func (r *runner) recordKills(killed []plans.Blocker) {
	if len(killed) == 0 {
		return
	}
	r.mu.Lock()
	if n := len(r.p.Attempts); n > 0 {
		a := &r.p.Attempts[n-1]
		for _, k := range killed {
			found := false
			for i := range a.Blockers {
				if a.Blockers[i].ID == k.ID {
					a.Blockers[i].Killed, a.Blockers[i].Note, found = k.Killed, k.Note, true
				}
			}
			if !found {
				a.Blockers = append(a.Blockers, k)
			}
		}
	}
	r.mu.Unlock()
	var names []string
	for _, k := range killed {
		names = append(names, k.String())
	}
	r.env.Log.Warn("killed blocking sessions (--kill-blockers)", "sessions", strings.Join(names, "; "))
	_ = r.save(true)
}
