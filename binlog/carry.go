package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/schema"
	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/internal/sqltok"
	"github.com/shardctl/shardctl/tables"
)

// What the tail does with a schema change of a listed table (Config.OnDDL).
const (
	DDLStop   = "stop"   // stop before it (the default): re-plan and restart
	DDLApply  = "apply"  // run the same statement on the target, at the same point of the stream
	DDLIgnore = "ignore" // record it and go on; the operator changes the target
)

// CarriedDDL is a schema change the tail carried past (Config.OnCarried).
type CarriedDDL struct {
	Table     string   `json:"table"`
	Statement string   `json:"statement"`      // as the source's binlog has it
	Ran       string   `json:"ran,omitempty"`  // as run on the target (apply)
	Columns   []string `json:"columns"`        // the table's columns after it
	At        Position `json:"at"`             // the boundary before it
	Mode      string   `json:"mode"`           // apply or ignore
	Note      string   `json:"note,omitempty"` // e.g. the target had it already (a replay after a crash)
	// A shadowed table's change (shadow): Columns are nil until it ran,
	// then the target's; the table's new definition goes back to the
	// handler on def.
	def chan *schema.Table
}

// carry decides whether a schema change of the source schema can be carried
// to the target: a single ALTER TABLE, CREATE INDEX or DROP INDEX of one
// listed table that leaves its primary key, its sharding column and its
// name alone. It returns the table, or why not.
func carry(p *parser.Parser, query, schema, defaultDB string, listed map[string]*tables.Table) (*tables.Table, string) {
	stmts, _, err := p.Parse(query, "", "")
	if err != nil || len(stmts) != 1 {
		return nil, "a statement shardctl cannot read"
	}
	var tn *ast.TableName
	check := func(*tables.Table) string { return "" }
	switch s := stmts[0].(type) {
	case *ast.AlterTableStmt:
		tn = s.Table
		check = func(t *tables.Table) string { return alterRefusal(s, t) }
	case *ast.CreateIndexStmt:
		tn = s.Table
	case *ast.DropIndexStmt:
		tn = s.Table
		if strings.EqualFold(s.IndexName, "PRIMARY") {
			return nil, "a change of the primary key"
		}
	case *ast.RenameTableStmt:
		return nil, "a RENAME of a table"
	default:
		return nil, "a statement other than ALTER TABLE, CREATE INDEX or DROP INDEX"
	}
	db := tn.Schema.O
	if db == "" {
		db = defaultDB
	}
	t := listed[tn.Name.O]
	if !strings.EqualFold(db, schema) || t == nil {
		return nil, "a change of a table the operation does not copy"
	}
	if why := check(t); why != "" {
		return nil, why
	}
	return t, ""
}

// alterRefusal says why an ALTER TABLE of t cannot be carried, or "".
func alterRefusal(s *ast.AlterTableStmt, t *tables.Table) string {
	key := func(col string) string {
		if slices.ContainsFunc(t.PK, func(k string) bool { return strings.EqualFold(k, col) }) {
			return "a change of the primary key column " + col
		}
		shard := t.ShardColumn
		if shard == "" {
			shard = t.Filter.Column
		}
		if shard != "" && strings.EqualFold(shard, col) {
			return "a change of the sharding column " + col
		}
		return ""
	}
	for _, sp := range s.Specs {
		switch sp.Tp {
		case ast.AlterTableAddColumns:
			for _, c := range sp.NewColumns {
				for _, o := range c.Options {
					if o.Tp == ast.ColumnOptionPrimaryKey {
						return "a change of the primary key"
					}
				}
			}
		case ast.AlterTableAddConstraint:
			if sp.Constraint != nil && sp.Constraint.Tp == ast.ConstraintPrimaryKey {
				return "a change of the primary key"
			}
		case ast.AlterTableDropPrimaryKey:
			return "a change of the primary key"
		case ast.AlterTableDropIndex:
			if strings.EqualFold(sp.Name, "PRIMARY") {
				return "a change of the primary key"
			}
		case ast.AlterTableDropColumn, ast.AlterTableChangeColumn, ast.AlterTableRenameColumn:
			if sp.OldColumnName != nil {
				if why := key(sp.OldColumnName.Name.O); why != "" {
					return why
				}
			}
		case ast.AlterTableModifyColumn:
			for _, c := range sp.NewColumns {
				if why := key(c.Name.Name.O); why != "" {
					return why
				}
			}
		case ast.AlterTableRenameTable:
			return "a RENAME of the table"
		case ast.AlterTableAlterColumn, ast.AlterTableDropForeignKey, ast.AlterTableRenameIndex,
			ast.AlterTableOption, ast.AlterTableAlgorithm, ast.AlterTableLock, ast.AlterTableIndexInvisible:
		default:
			return "an ALTER TABLE clause shardctl does not carry"
		}
	}
	return ""
}

// retarget returns the statement with every name qualified by the source
// schema requalified by the target schema; unqualified names resolve in the
// session's default schema, which the applier sets to the target schema.
func retarget(query, source, target string) string {
	return sqltok.Requalify(query, source, dbutil.QuoteIdent(target))
}

// alreadyThere reports errors a replayed statement meets when the target
// has it already (a crash between running it and the checkpoint after it).
func alreadyThere(err error) bool {
	switch dbutil.ErrNumber(err) {
	case 1060, 1061, 1091, 1826: // duplicate column, duplicate key name, cannot drop (gone), duplicate foreign key
		return true
	}
	return false
}

// execDDL runs a carried statement on the target, on a session of its own
// whose default schema is the target schema.
func (t *Tailer) execDDL(d *CarriedDDL) error {
	conn, err := t.cfg.Target.Conn(t.ctx)
	if err != nil {
		return err
	}
	defer discard(conn)
	if _, err := conn.ExecContext(t.ctx, "USE "+dbutil.QuoteIdent(t.cfg.TargetSchema)); err != nil {
		return err
	}
	_, err = conn.ExecContext(t.ctx, d.Ran)
	if err != nil && alreadyThere(err) {
		d.Note = fmt.Sprintf("the target had it already (%v)", err)
		return nil
	}
	return err
}

// carried runs (apply) or skips (ignore) a schema change at its place in
// the stream. Everything before it is committed and checkpointed first, and
// it is reported (the caller records the table's new columns) before it
// runs, so a crash at any point resumes at the statement with the new
// columns on record: the statement runs again, or meets what it did
// (alreadyThere). The boundary after it is checkpointed at once. A shadowed
// table's new columns are the target's once it ran: they are reported then,
// and the plan keeps the old ones until (a crash before resumes with the
// target's, shadow).
func (t *Tailer) carried(d *CarriedDDL) error {
	if err := t.checkpoint(t.Applied()); err != nil {
		return err
	}
	report := func() error {
		if t.cfg.OnCarried == nil {
			return nil
		}
		return t.cfg.OnCarried(context.WithoutCancel(t.ctx), *d)
	}
	if err := report(); err != nil {
		return err
	}
	fault.Hit("ddl:recorded") // tests: a crash between the record and the statement
	if d.Mode == DDLApply {
		if err := t.execDDL(d); err != nil {
			return fmt.Errorf("binlog tail of %s: run the schema change %q on %s: %w", t.cfg.Schema, shorten(d.Ran, 300), t.cfg.TargetSchema, err)
		}
		fault.Hit("ddl:ran") // tests: a crash between the statement and the checkpoint after it
	}
	t.log.Info("schema change carried", "table", d.Table, "mode", d.Mode, "statement", shorten(d.Statement, 300), "note", d.Note)
	if d.def != nil {
		def, err := t.targetDefinition(t.ctx, d.Table)
		if err != nil {
			return err
		}
		d.Columns = make([]string, len(def.Columns))
		for i, c := range def.Columns {
			d.Columns[i] = c.Name
		}
		if err := report(); err != nil {
			return err
		}
		d.def <- def
		return nil
	}
	if d.Note != "" {
		return report()
	}
	return nil
}

// targetDefinition reads a table's definition on the target, under the
// source's names, for canal to decode row events with (see shadowed).
func (t *Tailer) targetDefinition(ctx context.Context, table string) (*schema.Table, error) {
	def := &schema.Table{Schema: t.cfg.Schema, Name: table}
	var name, ctype, extra string
	var coll sql.NullString
	err := dbutil.ScanEach(ctx, t.cfg.Target, `SELECT COLUMN_NAME, COLUMN_TYPE, COLLATION_NAME, EXTRA FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, []any{t.cfg.TargetSchema, table}, []any{&name, &ctype, &coll, &extra}, func() error {
		def.AddColumn(name, ctype, coll.String, extra)
		return nil
	})
	if err == nil && len(def.Columns) == 0 {
		err = fmt.Errorf("no such table")
	}
	if err != nil {
		return nil, fmt.Errorf("binlog tail of %s: read the definition of %s.%s on the target: %w", t.cfg.Schema, t.cfg.TargetSchema, table, err)
	}
	return def, nil
}

// shadow makes canal decode a table's row events with the target's
// definition instead of the source's current one (--on-ddl apply, a table
// whose columns changed on the source before the tail got there: during the
// copy, or while no tail ran). canal otherwise decodes old events with the
// source's current columns. The target table had every change before the
// tail's position and gets each later one at its place in the stream
// (carried), so its definition is the source's as of the event being read.
// The table's columns become the target's.
func (t *Tailer) shadow(ctx context.Context, tb *tables.Table) error {
	def, err := t.targetDefinition(ctx, tb.Name)
	if err != nil {
		return err
	}
	names := make([]string, len(def.Columns))
	for i, c := range def.Columns {
		names[i] = c.Name
	}
	t.log.Info("binlog tail: a table's columns changed on the source before the tail's position; its rows are read with the target's definition until the tail carries the change",
		"table", tb.Name, "target_columns", strings.Join(names, ", "), "planned_columns", strings.Join(tb.Columns, ", "))
	tb.Columns = names
	if t.shadowed == nil {
		t.shadowed = map[string]*schema.Table{}
	}
	t.shadowed[tb.Name] = def
	return nil
}
