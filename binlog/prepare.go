package binlog

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/tables"
)

func validate(cfg *Config) error {
	switch {
	case cfg.Schema == "":
		return errors.New("binlog tail: no source schema given")
	case cfg.Target == nil:
		return fmt.Errorf("binlog tail of %s: no target server given", cfg.Schema)
	case cfg.TargetSchema == "":
		return fmt.Errorf("binlog tail of %s: no target schema given", cfg.Schema)
	case len(cfg.Tables) == 0:
		return fmt.Errorf("binlog tail of %s: no tables listed", cfg.Schema)
	case cfg.ServerID == 0:
		return fmt.Errorf("binlog tail of %s: server id 0 is reserved; give a unique replica server id", cfg.Schema)
	case cfg.Start.IsZero():
		return fmt.Errorf("binlog tail of %s: no start position given", cfg.Schema)
	case cfg.Source.Host == "" || cfg.Source.Port == 0:
		return fmt.Errorf("binlog tail of %s: no source server address given", cfg.Schema)
	case cfg.OnDDL != "" && cfg.OnDDL != DDLStop && cfg.OnDDL != DDLApply && cfg.OnDDL != DDLIgnore:
		return fmt.Errorf("binlog tail of %s: on a schema change %q: give stop, apply or ignore", cfg.Schema, cfg.OnDDL)
	}
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	cfg.Tables = append([]tables.Table(nil), cfg.Tables...) // the caller may reuse its slice
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	seen := map[string]bool{}
	for _, tb := range cfg.Tables {
		if seen[tb.Name] {
			return fmt.Errorf("binlog tail of %s: table %s listed twice", cfg.Schema, tb.Name)
		}
		seen[tb.Name] = true
		if len(tb.Columns) == 0 {
			return fmt.Errorf("binlog tail of %s: table %s has no column list", cfg.Schema, tb.Name)
		}
		if len(tb.PK) == 0 {
			return fmt.Errorf("binlog tail of %s: table %s has no primary key; rows cannot be applied idempotently without one", cfg.Schema, tb.Name)
		}
		for _, pk := range tb.PK {
			if indexOf(tb.Columns, pk) < 0 {
				return fmt.Errorf("binlog tail of %s: table %s: primary key column %q is not in its column list", cfg.Schema, tb.Name, pk)
			}
		}
		if !tb.Filter.All() && indexOf(tb.Columns, tb.Filter.Column) < 0 {
			return fmt.Errorf("binlog tail of %s: table %s: filter column %q is not in its column list", cfg.Schema, tb.Name, tb.Filter.Column)
		}
	}
	return nil
}

func (t *Tailer) prepareSource(ctx context.Context) error {
	s := t.cfg.Schema
	db, err := dbutil.Open(ctx, t.cfg.Source, t.cfg.Creds, "")
	if err != nil {
		return fmt.Errorf("binlog tail of %s: source: %w", s, err)
	}
	db.SetMaxOpenConns(2)
	t.src = db
	if t.flavor, err = dbutil.FlavorOf(ctx, db); err != nil {
		return fmt.Errorf("binlog tail of %s: source: %w", s, err)
	}
	if t.tls, err = binlogTLS(ctx, db, t.cfg.Source.Host, t.cfg.Creds.TLS); err != nil {
		return fmt.Errorf("binlog tail of %s: source: %w", s, err)
	}
	if t.server, err = ServerIdentity(ctx, db); err != nil {
		return fmt.Errorf("binlog tail of %s: source: %w", s, err)
	}
	if st := t.cfg.Start; st.Server != "" && st.Server != t.server {
		// A failover: the start's File:Pos mean nothing here, its GTID set does.
		if st.GTID == "" {
			return fmt.Errorf("binlog tail of %s: %w", s, ErrNoGTID)
		}
		t.byGTID = true
		t.applied, t.checkpointed = Position{}, Position{}
	}
	if !t.byGTID && t.flavor.MySQL && t.cfg.Start.GTID != "" {
		if t.fromSet, err = startsFromSet(ctx, db, t.cfg.Start.GTID); err != nil {
			return fmt.Errorf("binlog tail of %s: source: %w", s, err)
		}
	}
	var format, image string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image").Scan(&format, &image); err != nil {
		return fmt.Errorf("binlog tail of %s: read the source's binlog settings: %w", s, err)
	}
	if format != "ROW" || image != "FULL" {
		return fmt.Errorf("binlog tail of %s: the source %s logs binlog_format=%s binlog_row_image=%s; an online move needs ROW and FULL",
			s, t.cfg.Source, format, image)
	}
	purged, err := t.startPurged(ctx, db)
	if err != nil {
		return fmt.Errorf("binlog tail of %s: check the start position %s: %w", s, t.cfg.Start, err)
	}
	if purged && t.byGTID {
		return fmt.Errorf("binlog tail of %s: the source %s has purged binlogs holding transactions after the start GTID set %s; the changes since then are lost to the tail, so the operation must start over with a fresh copy",
			s, t.cfg.Source, t.cfg.Start.GTID)
	}
	if purged {
		return fmt.Errorf("binlog tail of %s: the start position %s is in a binlog file the source %s has already purged; the changes since then are lost to the tail, so the operation must start over with a fresh copy (and a longer binlog retention)",
			s, t.cfg.Start, t.cfg.Source)
	}
	if t.baseFP, err = schemaFingerprint(ctx, db, s); err != nil {
		return fmt.Errorf("binlog tail of %s: read the source schema: %w", s, err)
	}
	return t.checkPlannedColumns(ctx)
}

// startPurged reports whether the source no longer has the binlog the tail
// starts from. A start recorded on another server (byGTID) names that
// server's file, which says nothing about this one's: a primary that rotated
// more often than its replica has file numbers past the replica's newest.
// There MySQL's gtid_purged decides (every purged GTID must be in the start
// set); MariaDB's binlog dump refuses a GTID it no longer has once it starts.
func (t *Tailer) startPurged(ctx context.Context, db *sql.DB) (bool, error) {
	if !t.byGTID {
		return Purged(ctx, db, t.cfg.Start)
	}
	if !t.flavor.MySQL {
		return false, nil
	}
	var gone string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_purged").Scan(&gone); err != nil {
		return false, fmt.Errorf("read gtid_purged: %w", err)
	}
	held, err := GTIDContains(t.flavor.Name(), t.cfg.Start.GTID, strings.ReplaceAll(gone, "\n", ""))
	return !held, err
}

// checkPlannedColumns refuses to start when a listed table's columns are no
// longer the planned ones: canal decodes old events with the current
// definition, so a change made while no tail ran would shift values silently.
// With --on-ddl apply such a table is read with the target's definition
// instead (shadow), and the change is carried when the tail meets it.
func (t *Tailer) checkPlannedColumns(ctx context.Context) error {
	s := t.cfg.Schema
	cols := map[string][]string{}
	var tn, cn string
	err := dbutil.ScanEach(ctx, t.src, `SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME, ORDINAL_POSITION`, []any{s}, []any{&tn, &cn}, func() error {
		cols[tn] = append(cols[tn], cn)
		return nil
	})
	if err != nil {
		return fmt.Errorf("binlog tail of %s: read the source columns: %w", s, err)
	}
	for _, tb := range t.cfg.Tables {
		have, ok := cols[tb.Name]
		if !ok {
			return fmt.Errorf("binlog tail of %s: table %s.%s no longer exists on the source: %w; re-plan and restart the operation", s, s, tb.Name, ErrDDL)
		}
		same := len(have) == len(tb.Columns)
		for i := 0; same && i < len(have); i++ {
			same = strings.EqualFold(have[i], tb.Columns[i])
		}
		if !same && t.cfg.OnDDL == DDLApply {
			if err := t.shadow(ctx, t.tables[tb.Name]); err != nil {
				return err
			}
			continue
		}
		if !same {
			return fmt.Errorf("binlog tail of %s: table %s.%s now has columns (%s), the operation was planned with (%s): %w (%w); re-plan and restart the operation",
				s, s, tb.Name, strings.Join(have, ", "), strings.Join(tb.Columns, ", "), ErrDDL, ErrDDLBeforeStart)
		}
	}
	return nil
}

func (t *Tailer) prepareTarget(ctx context.Context) error {
	if _, err := t.session(ctx, 0); err != nil { // the first worker's: it applies whatever is not spread over the workers
		return err
	}
	var maxPacket int
	if err := t.conns[0].QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		return fmt.Errorf("binlog tail of %s: target: %w", t.cfg.Schema, err)
	}
	t.lim = limits{rows: 1000, bytes: min(maxPacket/2, 16<<20)}
	t.nontx = map[string]bool{}
	var name string
	err := dbutil.ScanEach(ctx, t.conns[0], `SELECT TABLE_NAME FROM information_schema.TABLES
		 WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' AND ENGINE IS NOT NULL AND ENGINE <> 'InnoDB'`,
		[]any{t.cfg.TargetSchema}, []any{&name}, func() error { t.nontx[name] = true; return nil })
	if err != nil {
		return fmt.Errorf("binlog tail of %s: read the target's table engines: %w", t.cfg.Schema, err)
	}
	for _, tb := range t.cfg.Tables {
		q := "SELECT 1 FROM " + dbutil.Table(t.cfg.TargetSchema, tb.Name) + " LIMIT 0"
		rows, err := t.conns[0].QueryContext(ctx, q)
		if err != nil {
			return fmt.Errorf("binlog tail of %s: target table %s.%s: %w", t.cfg.Schema, t.cfg.TargetSchema, tb.Name, err)
		}
		rows.Close()
	}
	return nil
}

// session returns worker w's session on the target, opening it if needed.
// The session writes rows as replication does: strict (a value that does not
// fit is an error, not a silent truncation), explicit zero ids kept, UTC for
// TIMESTAMP text, and no foreign key checks (a replay passes through states
// where a parent is not there yet).
func (t *Tailer) session(ctx context.Context, w int) (*sql.Conn, error) {
	if c := t.conns[w]; c != nil {
		return c, nil
	}
	c, err := t.cfg.Target.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("binlog tail of %s: connect to the target: %w", t.cfg.Schema, err)
	}
	for _, q := range []string{
		"SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION'",
		"SET SESSION time_zone = '+00:00'",
		"SET SESSION foreign_key_checks = 0",
		schemaobj.SkipSQL, // guarded triggers on the target do not fire on applied rows
	} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			discard(c)
			return nil, fmt.Errorf("binlog tail of %s: target session (%s): %w", t.cfg.Schema, q, err)
		}
	}
	for _, q := range t.cfg.SessionSQL {
		if _, err := c.ExecContext(ctx, q); err != nil {
			discard(c)
			return nil, fmt.Errorf("binlog tail of %s: target session (%s): %w", t.cfg.Schema, q, err)
		}
	}
	t.conns[w] = c
	return c, nil
}

// dropSession closes worker w's session (a lost connection, or session
// settings left changed); the next use opens a new one.
func (t *Tailer) dropSession(w int) {
	if t.conns[w] != nil {
		discard(t.conns[w])
		t.conns[w] = nil
	}
}

// discard closes c without returning it to the pool: its session variables
// are not what other users of the pool expect.
func discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}
