package binlog

import (
	"bytes"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-mysql-org/go-mysql/schema"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/tables"
)

// opKind is what an action does on the target.
type opKind uint8

const (
	opUpsert opKind = iota + 1 // REPLACE the row image
	opDelete                   // DELETE by primary key
)

// action is one statement row for the target: an upsert of a full row image
// (only the writable columns) or a delete by primary key values.
type action struct {
	op    opKind
	shape *shape
	vals  []any
	count bool  // counts as one applied row change (the delete half of a PK move does not)
	image []any // cascading deletes: the parent's written columns, re-inserted (IGNORE) before the delete
}

// shape is what the applier needs to write one table; it is built from the
// canal table definition and never changes afterwards, so the canal goroutine
// and the applier can share it without locks.
type shape struct {
	name      string
	target    string // `schema`.`table` on the target
	canal     *schema.Table
	textual   []bool // per source column: send a string value as is (temporal/decimal text) rather than as bytes
	bit       []bool // per source column: BIT, sent unsigned
	writeIdx  []int  // source columns written by an upsert (generated columns are left out)
	pkIdx     []int
	filterIdx int // -1: every row is in scope
	replace   string
	rowPH     string
	delSingle string // DELETE ... WHERE pk IN (
	delRow    string // (a = ? AND b = ?) for composite keys
	// cascade: deleting a row of this table changes child rows (ON DELETE
	// CASCADE / SET NULL). The source's binlog carries only the parent's row
	// event (measured on MariaDB 10.11; MySQL does the same), so the applier
	// repeats the delete with foreign key checks on, letting the target's
	// InnoDB run the same cascade.
	cascade   bool
	insIgnore string // INSERT IGNORE INTO ... (writable columns) VALUES (...)
	// probes: the target serves keys outside the filter (Config.IntoExisting),
	// so the rows a statement would remove are looked up first (guard.go).
	probes []probe
	// idIdx, idGuard: the AUTO_INCREMENT column whose incoming values stay
	// below idGuard (Config.IDGuards; idGuard 0: none).
	idIdx   int
	idGuard uint64
}

// newShape checks the canal definition of a listed table against the
// table's planned column list and prepares the statements; guard: the
// target keeps rows of keys outside the table's filter (guard.go).
func newShape(t *tables.Table, ct *schema.Table, targetSchema string, cascade, guard bool) (*shape, error) {
	if len(ct.Columns) != len(t.Columns) {
		return nil, fmt.Errorf("table %s.%s now has %d columns, the operation was planned with %d (%s): %w",
			ct.Schema, ct.Name, len(ct.Columns), len(t.Columns), strings.Join(t.Columns, ", "), ErrDDL)
	}
	s := &shape{
		name:      t.Name,
		target:    dbutil.Table(targetSchema, t.Name),
		canal:     ct,
		textual:   make([]bool, len(ct.Columns)),
		bit:       make([]bool, len(ct.Columns)),
		filterIdx: -1,
		cascade:   cascade,
	}
	for i, c := range ct.Columns {
		if !strings.EqualFold(c.Name, t.Columns[i]) {
			return nil, fmt.Errorf("table %s.%s column %d is now %q, the operation was planned with %q: %w",
				ct.Schema, ct.Name, i+1, c.Name, t.Columns[i], ErrDDL)
		}
		switch c.Type {
		case schema.TYPE_DATETIME, schema.TYPE_TIMESTAMP, schema.TYPE_DATE, schema.TYPE_TIME, schema.TYPE_DECIMAL,
			schema.TYPE_JSON: // MySQL refuses JSON from a binary string
			s.textual[i] = true
		case schema.TYPE_BIT:
			s.bit[i] = true
		}
		if !c.IsVirtual && !c.IsStored {
			s.writeIdx = append(s.writeIdx, i)
		}
	}
	for _, pk := range t.PK {
		i := indexOf(t.Columns, pk)
		if i < 0 {
			return nil, fmt.Errorf("table %s: primary key column %q is not among its columns", t.Name, pk)
		}
		s.pkIdx = append(s.pkIdx, i)
	}
	if !t.Filter.All() {
		s.filterIdx = indexOf(t.Columns, t.Filter.Column)
		if s.filterIdx < 0 {
			return nil, fmt.Errorf("table %s: filter column %q is not among its columns", t.Name, t.Filter.Column)
		}
	}
	cols := make([]string, len(s.writeIdx))
	for j, i := range s.writeIdx {
		cols[j] = t.Columns[i]
	}
	// REPLACE rather than INSERT ... ON DUPLICATE KEY UPDATE: replaying from
	// a position older than the copy meets rows in later states, where a
	// secondary unique value may sit on another row for a while. ODKU then
	// fails with a duplicate-key error (its UPDATE collides with the other
	// row); REPLACE removes the colliding row, whose own later change replays
	// after it, so the target converges to the source. Into an existing
	// shard, a genuine collision with a row of the target's own keys would
	// lose that row unseen (verify compares the moving keys' rows): the
	// probes stop the tail before it (guard.go).
	s.replace = "REPLACE INTO " + s.target + " (" + dbutil.QuoteIdents(cols) + ") VALUES "
	s.rowPH = "(" + dbutil.Placeholders(len(cols)) + ")"
	s.insIgnore = "INSERT IGNORE INTO " + s.target + " (" + dbutil.QuoteIdents(cols) + ") VALUES " + s.rowPH
	if len(s.pkIdx) == 1 {
		s.delSingle = "DELETE FROM " + s.target + " WHERE " + dbutil.QuoteIdent(t.PK[0]) + " IN ("
	} else {
		parts := make([]string, len(t.PK))
		for j, pk := range t.PK {
			parts[j] = dbutil.QuoteIdent(pk) + " = ?"
		}
		s.delSingle = "DELETE FROM " + s.target + " WHERE "
		s.delRow = "(" + strings.Join(parts, " AND ") + ")"
	}
	if guard && s.filterIdx >= 0 {
		s.guardProbes(t.PK, t.Filter.Column, ct.Indexes)
	}
	return s, nil
}

func indexOf(list []string, name string) int {
	for i, n := range list {
		if strings.EqualFold(n, name) {
			return i
		}
	}
	return -1
}

// normalize turns a decoded canal value into one the driver sends back
// exactly: character data as bytes (a _binary literal lands in any column
// charset unchanged, and compares under the column's collation), temporal
// and decimal text as strings, integers widened, BIT unsigned. It rewrites
// row in place (canal decoded it for this call and keeps no reference to
// it) and returns it.
func (s *shape) normalize(row []any) ([]any, error) {
	out := row
	for i, v := range row {
		switch x := v.(type) {
		case nil:
			out[i] = nil
		case string:
			switch {
			case s.textual[i]:
				out[i] = x
			case x == "":
				out[i] = []byte{} // never nil: an empty string stays ''
			default:
				// The string's own bytes, not a copy: canal made the string
				// for this row, and nothing here or in the driver writes to
				// it, so copying every character value bought nothing.
				out[i] = unsafe.Slice(unsafe.StringData(x), len(x))
			}
		case []byte:
			if s.textual[i] {
				out[i] = string(x)
				break
			}
			b := make([]byte, len(x))
			copy(b, x)
			out[i] = b
		case int64:
			if s.bit[i] {
				out[i] = uint64(x)
			} else {
				out[i] = x
			}
		case int32:
			out[i] = int64(x)
		case int16:
			out[i] = int64(x)
		case int8:
			out[i] = int64(x)
		case int:
			out[i] = int64(x)
		case uint64:
			out[i] = x
		case uint32:
			out[i] = uint64(x)
		case uint16:
			out[i] = uint64(x)
		case uint8:
			out[i] = uint64(x)
		case uint:
			out[i] = uint64(x)
		case float32:
			out[i] = float64(x) // widening is exact; the server rounds it back to the same FLOAT
		case float64:
			out[i] = x
		case time.Time: // only if ParseTime were on
			out[i] = x.Format("2006-01-02 15:04:05.999999")
		case *replication.JsonDiff:
			return nil, fmt.Errorf("column %s: partial JSON updates (binlog_row_value_options=PARTIAL_JSON) are not supported", s.canal.Columns[i].Name)
		case fmt.Stringer: // decimal.Decimal if UseDecimal were on
			out[i] = x.String()
		default:
			return nil, fmt.Errorf("column %s: unsupported binlog value of type %T", s.canal.Columns[i].Name, v)
		}
	}
	return out, nil
}

// inScope applies the table's filter to a normalized row.
func (s *shape) inScope(t *tables.Table, row []any) (bool, error) {
	if s.filterIdx < 0 {
		return true, nil
	}
	ok, err := t.Filter.Match(row[s.filterIdx])
	if err != nil {
		return false, fmt.Errorf("table %s: filter on %s: %w", t.Name, t.Filter.Column, err)
	}
	return ok, nil
}

func (s *shape) upsert(row []any, count bool) action {
	vals := row
	if len(s.writeIdx) != len(row) {
		vals = make([]any, len(s.writeIdx))
		for j, i := range s.writeIdx {
			vals[j] = row[i]
		}
	}
	return action{op: opUpsert, shape: s, vals: vals, count: count}
}

func (s *shape) delete(row []any, count bool) action {
	vals := make([]any, len(s.pkIdx))
	for j, i := range s.pkIdx {
		vals[j] = row[i]
	}
	return action{op: opDelete, shape: s, vals: vals, count: count}
}

// rowDelete is the delete of a source DELETE row event: on a cascading table
// it carries the row's image (see shape.cascade). The delete half of an
// update that changes the key is a plain delete: the source ran no ON DELETE
// action for it.
func (s *shape) rowDelete(row []any) action {
	a := s.delete(row, true)
	if s.cascade {
		a.image = s.upsert(row, false).vals
	}
	return a
}

func (s *shape) pkChanged(before, after []any) bool {
	for _, i := range s.pkIdx {
		if !sameValue(before[i], after[i]) {
			return true
		}
	}
	return false
}

func sameValue(a, b any) bool {
	ab, aok := a.([]byte)
	bb, bok := b.([]byte)
	if aok || bok {
		return aok && bok && bytes.Equal(ab, bb)
	}
	return a == b
}

// planUpdate is the decision table for an update whose before image is (or
// is not) in scope and whose after image is (or is not): a row moving out of
// the range is deleted, a row moving in is upserted, a row changing its key
// inside the range loses its old key first.
func planUpdate(beforeIn, afterIn, pkChanged bool) (deleteBefore, upsertAfter bool) {
	switch {
	case beforeIn && afterIn:
		return pkChanged, true
	case beforeIn:
		return true, false
	case afterIn:
		return false, true
	}
	return false, false
}

// stmt is one target statement with its arguments.
type stmt struct {
	table string
	sql   string
	args  []any
	// cascade: a parent's delete, run after pre (INSERT IGNORE of its image:
	// the copy may have read the children before the parent was deleted, so
	// the target may lack the parent and the cascade would not reach them)
	// with foreign key checks on.
	cascade bool
	pre     string
	preArgs []any
	guard   []action // the rows, when the table has probes (guard.go)
}

// limits bound a merged statement.
type limits struct {
	rows  int // rows per statement
	bytes int // estimated statement size
}

// mergeRuns merges runs of consecutive upserts (or deletes) of the same
// table into multi-row statements; order between runs is kept, and within a
// multi-row REPLACE rows are applied in order.
func mergeRuns(acts []action, lim limits) []stmt {
	var out []stmt
	for i := 0; i < len(acts); {
		a := acts[i]
		j := i + 1
		size := valuesSize(a.vals)
		maxRows := lim.rows
		if n := 65535 / max(1, len(a.vals)); n < maxRows {
			maxRows = n // stay under the placeholder limit should the driver prepare
		}
		for j < len(acts) && a.image == nil && acts[j].op == a.op && acts[j].shape == a.shape && acts[j].image == nil && j-i < maxRows {
			sz := valuesSize(acts[j].vals)
			if size+sz > lim.bytes {
				break
			}
			size += sz
			j++
		}
		out = append(out, makeStmt(acts[i:j]))
		i = j
	}
	return out
}

// compact keeps only the last action of each row (table and primary key) and
// orders the batch as deletes, then upserts, each grouped by table. A batch
// commits in one target transaction, so only each row's final state matters,
// and a backlog then applies as a few large statements per table instead of
// one per row change. REPLACE settles unique values that move between rows
// of the batch in any order (see newShape).
//
// ok is false when the batch keeps its source order (a cascading delete, a
// key that cannot be seen). When ok, each row appears once in out, so any
// split of out touches every row in one part only: the parts may commit in
// parallel (parallelApply).
func compact(acts []action) (out []action, ok bool) {
	if len(acts) < 2 {
		for _, a := range acts {
			if _, seen := a.key(); a.image != nil || !seen {
				return acts, false
			}
		}
		return acts, true
	}
	// A row is its table's name and key, not its shape object: a shape is
	// rebuilt when canal reloads the table's definition, and the row is the
	// same row. (A batch never spans a carried schema change, which commits
	// the batch first; the name is simply the right identity.)
	type rowKey struct {
		table string
		k     string
	}
	last := make(map[rowKey]int, len(acts))
	keys := make([]rowKey, len(acts))
	for i, a := range acts {
		if a.image != nil {
			// A cascading delete changes rows it does not name: keep the
			// source order, so a child written before it is removed by it.
			return acts, false
		}
		k, seen := a.key()
		if !seen {
			return acts, false // a key we cannot see: keep the source order
		}
		keys[i] = rowKey{a.shape.name, k}
		last[keys[i]] = i
	}
	out = make([]action, 0, len(last))
	for _, op := range []opKind{opDelete, opUpsert} {
		var tables []string
		seen := map[string]bool{}
		for _, a := range acts {
			if a.op == op && !seen[a.shape.name] {
				seen[a.shape.name] = true
				tables = append(tables, a.shape.name)
			}
		}
		for _, tb := range tables {
			for i, a := range acts {
				if a.op == op && a.shape.name == tb && last[keys[i]] == i {
					out = append(out, a)
				}
			}
		}
	}
	return out, true
}

// key renders the action's primary key values; ok is false when an upsert
// does not write every key column (a generated key).
func (a action) key() (string, bool) {
	idx := a.shape.pkInVals(a.op)
	if idx == nil {
		return "", false
	}
	return renderVals(a.vals, idx), true
}

// pkInVals gives the positions of the primary key values in an action's
// values: deletes carry exactly the key, upserts the written columns.
func (s *shape) pkInVals(op opKind) []int {
	if op == opDelete {
		idx := make([]int, len(s.pkIdx))
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	var idx []int
	for _, p := range s.pkIdx {
		j := indexOfInt(s.writeIdx, p)
		if j < 0 {
			return nil
		}
		idx = append(idx, j)
	}
	return idx
}

func indexOfInt(list []int, v int) int {
	for i, x := range list {
		if x == v {
			return i
		}
	}
	return -1
}

func makeStmt(run []action) stmt {
	s := run[0].shape
	var b strings.Builder
	args := make([]any, 0, len(run)*len(run[0].vals))
	switch run[0].op {
	case opUpsert:
		b.Grow(len(s.replace) + len(run)*(len(s.rowPH)+1))
		b.WriteString(s.replace)
		for k, a := range run {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(s.rowPH)
			args = append(args, a.vals...)
		}
	case opDelete:
		b.WriteString(s.delSingle)
		if s.delRow == "" {
			b.WriteString(dbutil.Placeholders(len(run)))
			b.WriteByte(')')
		} else {
			for k := range run {
				if k > 0 {
					b.WriteString(" OR ")
				}
				b.WriteString(s.delRow)
			}
		}
		for _, a := range run {
			args = append(args, a.vals...)
		}
	}
	st := stmt{table: s.name, sql: b.String(), args: args}
	if run[0].image != nil {
		st.cascade, st.pre, st.preArgs = true, s.insIgnore, run[0].image
	}
	if len(s.probes) > 0 {
		st.guard = run
	}
	return st
}

// valuesSize estimates the bytes a row takes in an interpolated statement.
func valuesSize(vals []any) int {
	n := 4
	for _, v := range vals {
		switch x := v.(type) {
		case []byte:
			n += 2*len(x) + 12
		case string:
			n += 2*len(x) + 4
		default:
			n += 22
		}
	}
	return n
}
