package binlog

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/schema"
	"github.com/shardctl/shardctl/dbutil"
)

// ErrForeignRow stops a tail into an existing shard (Config.IntoExisting)
// before it replaces or deletes a target row whose shard key is outside the
// keys moving in: a row the target serves for one of its own keys. It is a
// genuine collision between two tenants' rows, not a replay: deterministic.
var ErrForeignRow = errors.New("the change would overwrite a row the target holds for a key outside the keys moving in")

// ErrIDGuard stops a tail whose source issued an AUTO_INCREMENT id at or
// past the target's raised counter (Config.IDGuards): the source outran the
// margin. Transient: a resume raises the target's counter again before the
// tail goes on.
var ErrIDGuard = errors.New("the source's AUTO_INCREMENT ids reached the target's raised counter")

// checkID stops at an incoming row whose AUTO_INCREMENT id is at or past
// the guard, before it reaches the target.
func (s *shape) checkID(row []any) error {
	if s.idGuard == 0 {
		return nil
	}
	var id uint64
	switch v := row[s.idIdx].(type) {
	case int64:
		if v < 0 {
			return nil
		}
		id = uint64(v)
	case uint64:
		id = v
	default:
		return nil
	}
	if id < s.idGuard {
		return nil
	}
	return fmt.Errorf("%w: a row with %s = %d, at or past the target's counter %d raised at create; the tail stopped before applying it (the row would drag the target's counter into the ids the source issues next): resume raises the target's counter again and goes on",
		ErrIDGuard, s.canal.Columns[s.idIdx].Name, id, s.idGuard)
}

// probe looks up, before a statement runs, the target rows it would remove:
// by the primary key (REPLACE and DELETE), or by a unique key that does not
// carry the filter column (REPLACE also deletes a row colliding on any
// unique key; one that carries the filter column cannot meet another key's
// row).
type probe struct {
	name string   // PRIMARY or the unique key's name
	cols []string // the key's columns
	up   []int    // their positions in an upsert's values
	sql  string   // SELECT <cols>, <pk>, <filter> FROM target WHERE <cols> IN (
	row  string   // one value of the IN list: ? or (?, ?)
}

// guardProbes prepares the probes of a filtered table in a tail into an
// existing shard. A key with a column an upsert does not write (a generated
// column) cannot be looked up from the row: it is left out, and a table whose
// primary key is one gets no probes (docs/split-merge.md, limits).
func (s *shape) guardProbes(pk []string, filterCol string, idx []*schema.Index) {
	keys := []*schema.Index{{Name: "PRIMARY", Columns: pk}}
	for _, ix := range idx {
		if ix.NoneUnique == 0 && !strings.EqualFold(ix.Name, "PRIMARY") &&
			!slices.ContainsFunc(ix.Columns, func(c string) bool { return strings.EqualFold(c, filterCol) }) {
			keys = append(keys, ix)
		}
	}
	sel := dbutil.QuoteIdents(pk) + ", " + dbutil.QuoteIdent(filterCol) + " FROM " + s.target + " WHERE "
	for _, k := range keys {
		p := probe{name: k.Name, cols: k.Columns, row: "(" + dbutil.Placeholders(len(k.Columns)) + ")"}
		for _, c := range k.Columns {
			j := indexOfInt(s.writeIdx, indexOf(columnNames(s.canal), c))
			if j < 0 {
				p.up = nil
				break
			}
			p.up = append(p.up, j)
		}
		if p.up == nil {
			if k.Name == "PRIMARY" {
				return
			}
			continue
		}
		lhs := dbutil.QuoteIdents(k.Columns)
		if len(k.Columns) == 1 {
			p.row = "?"
		} else {
			lhs = "(" + lhs + ")"
		}
		p.sql = "SELECT " + dbutil.QuoteIdents(k.Columns) + ", " + sel + lhs + " IN ("
		s.probes = append(s.probes, p)
	}
}

func columnNames(t *schema.Table) []string {
	out := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		out[i] = c.Name
	}
	return out
}

// guard runs the probes of a guarded statement's rows in tx, before the
// statement. An upsert that would replace a row of a key outside the filter
// stops the tail (ErrForeignRow, the target's row untouched); a delete of
// one is dropped from the statement: that row is the target's own, and the
// source's row of the same key never reached the target (the insert and
// the delete compacted into the delete, or an earlier run stopped at it).
// It returns the statement to run, or ok false when none is left.
func (t *Tailer) guard(tx *sql.Tx, st stmt) (stmt, bool, error) {
	run := st.guard
	s := run[0].shape
	tb := t.tables[s.name]
	probes := s.probes
	if run[0].op == opDelete {
		probes = probes[:1] // a delete removes by primary key only
	}
	var foreign map[string]bool // deletes: the keys (rendered) to leave alone
	for _, p := range probes {
		at := p.up
		if run[0].op == opDelete {
			at = s.pkInVals(opDelete)
		}
		var b strings.Builder
		b.WriteString(p.sql)
		args := make([]any, 0, len(run)*len(at))
		for k, a := range run {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(p.row)
			for _, i := range at {
				args = append(args, a.vals[i])
			}
		}
		b.WriteByte(')')
		rows, err := tx.QueryContext(t.ctx, b.String(), args...)
		if err != nil {
			return st, false, fmt.Errorf("look up the target rows the change replaces (%s): %w", p.name, err)
		}
		n, npk := len(p.cols), len(s.pkIdx)
		vals := make([]any, n+npk+1)
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		var hit error
		for hit == nil && rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				_ = rows.Close()
				return st, false, err
			}
			in, err := tb.Filter.Match(vals[n+npk])
			if err != nil {
				_ = rows.Close()
				return st, false, fmt.Errorf("filter on %s: %w", tb.Filter.Column, err)
			}
			if in {
				continue
			}
			if run[0].op == opDelete {
				if foreign == nil {
					foreign = map[string]bool{}
				}
				foreign[renderVals(vals[n:n+npk], nil)] = true
				continue
			}
			hit = t.foreignRow(s, p, run, vals, n, npk)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return st, false, err
		}
		if hit != nil {
			return st, false, hit
		}
	}
	if len(foreign) == 0 {
		return st, true, nil
	}
	kept := make([]action, 0, len(run))
	for _, a := range run {
		if k, _ := a.key(); !foreign[k] {
			kept = append(kept, a)
		}
	}
	t.log.Warn("binlog tail: a delete of the source's row left alone the target's own row with the same primary key", "table", s.name, "rows", len(run)-len(kept))
	if len(kept) == 0 {
		return st, false, nil
	}
	return makeStmt(kept), true, nil
}

// foreignRow is the error of an upsert that would replace the target's row
// vals (probe p's columns, the primary key, the shard key) of another key.
func (t *Tailer) foreignRow(s *shape, p probe, run []action, vals []any, n, npk int) error {
	theirs := renderVals(vals[:n], nil)
	mine := "?"
	fi := indexOfInt(s.writeIdx, s.filterIdx)
	for _, a := range run {
		if renderVals(a.vals, p.up) == theirs && fi >= 0 {
			mine = showVal(a.vals[fi])
			break
		}
	}
	tb := t.tables[s.name]
	return fmt.Errorf("table %s: the source's row of key %s=%s has %s (%s)=(%s), which the target's row with primary key (%s)=(%s) of key %s=%s also holds, a key outside the keys moving in: %w; "+
		"this is a genuine id collision between two tenants (not a replay), the target's row is untouched and nothing of this batch was applied: "+
		"give the target's row another id (and the rows that refer to it, on the target), then resume; renumbering the source's row does not help, the tail replays its insert",
		s.name, tb.Filter.Column, mine, p.name, strings.Join(p.cols, ", "), showVals(vals[:n]),
		strings.Join(tb.PK, ", "), showVals(vals[n:n+npk]), tb.Filter.Column, showVal(vals[n+npk]), ErrForeignRow)
}

// renderVals renders values (those at idx, or all) as action.key does, so a
// target row and a row image compare by text.
func renderVals(vals []any, idx []int) string {
	var b strings.Builder
	if idx == nil {
		for _, v := range vals {
			writeVal(&b, v)
			b.WriteByte(0)
		}
		return b.String()
	}
	for _, i := range idx {
		writeVal(&b, vals[i])
		b.WriteByte(0)
	}
	return b.String()
}

func writeVal(b *strings.Builder, v any) {
	switch x := v.(type) {
	case []byte:
		b.Write(x)
	case string:
		b.WriteString(x)
	default:
		fmt.Fprint(b, v)
	}
}

func showVal(v any) string {
	if v == nil {
		return "NULL"
	}
	var b strings.Builder
	writeVal(&b, v)
	return b.String()
}

func showVals(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = showVal(v)
	}
	return strings.Join(parts, ", ")
}
