package verify

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/tables"
)

// repairSetup is the target session repairs write through, as the copy
// writes rows: explicit zero ids kept, no foreign key checks (a row comes
// back before or after its parent, as the source has them), guarded
// triggers silent, and the fence passed: the target here is the copy, which
// the fence guards against the application, not against shardctl.
var repairSetup = []string{
	chunk.UTC,
	"SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO', foreign_key_checks = 0",
	schemaobj.SkipSQL,
	fence.BypassSQL,
}

// Repaired counts what Repair changed on the target.
type Repaired struct {
	Written int64 `json:"written"` // rows inserted or overwritten with the source's values
	Deleted int64 `json:"deleted"` // rows the source does not have
}

// Repair makes the target's rows in the differing chunks cs of t match the
// source's: the chunks are narrowed again (rows may have changed since they
// were listed) and each differing row is read from the source by its key and
// written to the target, or deleted from the target when the source has no
// such row in scope. Each sub-range's rows are one transaction. The caller
// guards the target's triggers (the session sets the guard's variable).
func (v *Verifier) Repair(ctx context.Context, t tables.Table, cs []Chunk) (Repaired, error) {
	var done Repaired
	wrap := func(step string, err error) error {
		return fmt.Errorf("repair %s.%s from %s.%s: %s: %w", v.TargetSchema, t.Name, v.SourceSchema, t.Name, step, err)
	}
	sc, err := v.open(ctx, t)
	if err != nil {
		return done, wrap(sc.step, err)
	}
	defer sc.close()
	w, err := chunk.Session(ctx, v.Target, repairSetup...)
	if err != nil {
		return done, wrap("open target session", err)
	}
	defer chunk.Release(w)
	gen, err := chunk.Generated(ctx, sc.dst, v.TargetSchema, t.Name)
	if err != nil {
		return done, wrap("read generated columns", err)
	}
	var cols []chunk.Column
	for _, c := range sc.cols {
		if !gen[c.Name] {
			cols = append(cols, c)
		}
	}
	rw := &rowWriter{v: v, sc: sc, w: w, cols: cols, ins: replaceSQL(dbutil.Table(v.TargetSchema, t.Name), cols)}
	for _, c := range cs {
		err := v.narrow(ctx, sc, c, func(ds []RowDiff) error { return rw.fix(ctx, ds, &done) })
		if err != nil {
			return done, wrap(fmt.Sprintf("chunk (%q, %q]", c.Lo, c.Hi), err)
		}
	}
	return done, nil
}

// replaceSQL writes one row as the binlog apply does: REPLACE, so a row
// of the target that holds one of its unique values under another key goes
// (that row differs too, and is repaired from the source in its turn).
func replaceSQL(table string, cols []chunk.Column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return "REPLACE INTO " + table + " (" + dbutil.QuoteIdents(names) + ") VALUES (" + dbutil.Placeholders(len(cols)) + ")"
}

// rowWriter carries the source's rows over to the target by key.
type rowWriter struct {
	v    *Verifier
	sc   *scope
	w    *sql.Conn
	cols []chunk.Column // the written columns (generated ones left out)
	ins  string
}

// fix brings the rows ds to the source's state in one target transaction.
func (rw *rowWriter) fix(ctx context.Context, ds []RowDiff, done *Repaired) (err error) {
	if _, err := rw.w.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = rw.w.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	var n Repaired
	for _, d := range ds {
		eq, eqArgs, err := rw.sc.key.Equal(d.Key)
		if err != nil {
			return err
		}
		vals, found, err := rw.read(ctx, eq, eqArgs)
		if err != nil {
			return fmt.Errorf("read source row %q: %w", d.Key, err)
		}
		if found {
			if _, err := rw.w.ExecContext(ctx, rw.ins, vals...); err != nil {
				return fmt.Errorf("write row %q: %w", d.Key, err)
			}
			n.Written++
			continue
		}
		if _, err := rw.w.ExecContext(ctx, "DELETE FROM "+dbutil.Table(rw.v.TargetSchema, rw.sc.key.Table)+" WHERE "+eq, eqArgs...); err != nil {
			return fmt.Errorf("delete row %q: %w", d.Key, err)
		}
		n.Deleted++
	}
	if _, err := rw.w.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	done.Written += n.Written
	done.Deleted += n.Deleted
	return nil
}

// read returns the source row with the key eq among the rows in scope.
func (rw *rowWriter) read(ctx context.Context, eq string, eqArgs []any) ([]any, bool, error) {
	exprs := make([]string, len(rw.cols))
	for i, c := range rw.cols {
		exprs[i] = c.Expr()
	}
	rows, err := rw.sc.src.QueryContext(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+dbutil.Table(rw.v.SourceSchema, rw.sc.key.Table)+
		" WHERE "+eq+" AND "+rw.sc.where, append(eqArgs, rw.sc.whereArgs...)...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, false, rows.Err()
	}
	raw, dest := dbutil.Dest[sql.RawBytes](len(rw.cols))
	if err := rows.Scan(dest...); err != nil {
		return nil, false, err
	}
	vals := make([]any, len(raw))
	for i, r := range raw {
		vals[i] = rw.cols[i].Value(r)
	}
	if rows.Next() {
		return nil, false, errors.New("more than one row has this primary key")
	}
	return vals, true, rows.Err()
}
