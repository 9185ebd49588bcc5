package binlog

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/sqltok"
)

// ErrDDL is wrapped in the error a tail stops with when a schema change
// touches the source schema: rows after it would be decoded with the wrong
// column layout, so nothing from the statement on is applied.
var ErrDDL = errors.New("schema change (DDL) on the source schema")

// ErrDDLCarriable marks a schema change the tail stopped at (--on-ddl stop)
// that a tail running with --on-ddl apply would have carried.
var ErrDDLCarriable = errors.New("--on-ddl apply would have carried it")

// ErrDDLBeforeStart marks a tail that refused to start (--on-ddl stop or
// ignore) because a listed table's columns changed while no tail ran: a tail
// started with --on-ddl apply reads the rows before the change with the
// target's definition and meets the statement in the stream.
var ErrDDLBeforeStart = errors.New("--on-ddl apply would read the rows before the change with the target's definition")

// ddlError names the schema, table and statement, and tells the operator
// what to do; at is "at FILE:POS" or "after FILE:POS".
func ddlError(schema, table, statement, at string) error {
	where := "schema " + schema
	if table != "" {
		where = "table " + schema + "." + table
	}
	return fmt.Errorf("binlog tail of %s: %w %s on %s: %q; the tail stopped safely before applying it (the target has every change before it), re-plan and restart the operation so the copy sees the new definition",
		schema, ErrDDL, at, where, shorten(statement, 300))
}

func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// renameTargets returns the new names (schema, table) of the tables a RENAME
// TABLE or ALTER TABLE ... RENAME moves; canal reports only the old ones.
func renameTargets(p *parser.Parser, query, defaultDB string) [][2]string {
	stmts, _, err := p.Parse(query, "", "")
	if err != nil {
		return nil
	}
	var out [][2]string
	add := func(tn *ast.TableName) {
		if tn == nil {
			return
		}
		db := tn.Schema.O
		if db == "" {
			db = defaultDB
		}
		out = append(out, [2]string{db, tn.Name.O})
	}
	for _, st := range stmts {
		switch s := st.(type) {
		case *ast.RenameTableStmt:
			for _, tt := range s.TableToTables {
				add(tt.NewTable)
			}
		case *ast.AlterTableStmt:
			for _, spec := range s.Specs {
				if spec.Tp == ast.AlterTableRenameTable {
					add(spec.NewTable)
				}
			}
		}
	}
	return out
}

// words yields the identifiers of a statement (sqltok.Idents: outside
// string literals and comments; double quotes as names, see sqltok) and
// whether each was quoted.
func words(q string) iter.Seq2[string, bool] {
	return func(yield func(string, bool) bool) {
		for t := range sqltok.Idents(q) {
			if !yield(t.Text, t.Quoted) {
				return
			}
		}
	}
}

// mentionsIdent reports whether the statement text names ident as an
// identifier (bare, backquoted or double-quoted), outside string literals.
// It over-reports (a column with the schema's name counts), which only stops
// a tail that could have continued: the safe direction.
func mentionsIdent(q, ident string) bool {
	for w := range words(q) {
		if strings.EqualFold(w, ident) {
			return true
		}
	}
	return false
}

// firstKeyword returns the statement's first word in upper case, skipping
// whitespace and comments (an executable comment's code counts).
func firstKeyword(q string) string { return sqltok.FirstWord(q) }

// looksLikeDDL reports statements that may change a table definition.
func looksLikeDDL(q string) bool {
	switch firstKeyword(q) {
	case "CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE":
		return true
	}
	return false
}

// touchesTables reports whether a DDL statement's object is a table-like
// thing (table, index, database, sequence) rather than a trigger, routine,
// view or account, which leave row images alone: the fence's triggers must
// not stop the tail. It looks for the first object keyword among the bare
// words; none found counts as a table, the safe answer.
func touchesTables(q string) bool {
	for w, quoted := range words(q) {
		if quoted {
			continue
		}
		switch strings.ToUpper(w) {
		case "TABLE", "TABLES", "INDEX", "DATABASE", "SCHEMA", "SEQUENCE":
			return true
		case "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT", "VIEW", "USER", "ROLE", "SERVER", "PACKAGE":
			return false
		}
	}
	return true
}

// schemaFingerprint digests the schema's table and column definitions. The
// tail compares it against the one taken at start when it meets a statement
// canal cannot attribute to a table (DROP DATABASE, syntax its parser does not
// know), since such a statement may still have changed the schema.
func schemaFingerprint(ctx context.Context, db *sql.DB, schema string) (string, error) {
	h := sha256.New()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", schema).Scan(&n); err != nil {
		return "", err
	}
	fmt.Fprintf(h, "schema %d\n", n)
	// Views are left out: they carry no rows; so is an armed fence's table
	// (created while the tail runs, outside the binlog).
	var tn, cn, ct, null, extra string
	var pos int
	err := dbutil.ScanEach(ctx, db, `SELECT c.TABLE_NAME, c.COLUMN_NAME, c.ORDINAL_POSITION, c.COLUMN_TYPE, c.IS_NULLABLE, c.EXTRA
		FROM information_schema.COLUMNS c JOIN information_schema.TABLES t
		  ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
		WHERE c.TABLE_SCHEMA = ? AND t.TABLE_TYPE <> 'VIEW' AND c.TABLE_NAME <> ?
		ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION`, []any{schema, dbutil.FenceTable}, []any{&tn, &cn, &pos, &ct, &null, &extra}, func() error {
		fmt.Fprintf(h, "%q %q %d %q %s %q\n", tn, cn, pos, ct, null, extra)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// canalParseErrMsg is the message canal logs (at Error) when its SQL parser
// cannot read a statement and skips it; canal has no other hook for it.
const canalParseErrMsg = "error parsing query, will skip this event"

// canalLog is the slog handler given to canal: it forwards warnings and
// errors to the tail's logger, drops them while the tail stops (closing
// produces expected errors), and passes statements canal could not parse to
// onUnparsed so that a schema change hidden in one is not missed.
type canalLog struct {
	next       slog.Handler
	quiet      func() bool
	onUnparsed func(query string)
}

func (h *canalLog) Enabled(ctx context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *canalLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == canalParseErrMsg && h.onUnparsed != nil {
		var q string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "query" {
				q = a.Value.String()
				return false
			}
			return true
		})
		h.onUnparsed(q)
		return nil
	}
	if h.quiet != nil && h.quiet() {
		return nil
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *canalLog) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *canalLog) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}
