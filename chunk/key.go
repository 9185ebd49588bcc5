package chunk

// A table's key, typed: the tuple comparisons keyset chunking pages by, and
// the query that finds where a chunk ends.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
)

// Key is the key a table's rows are paged by (its primary key, or the
// UNIQUE key over NOT NULL columns that stands in for one), typed.
type Key struct {
	Schema, Table string
	Index         string // the index's name: PRIMARY, or the UNIQUE key's
	Cols          []Column
}

// ErrKeyType marks a key that keyset chunking cannot page on exactly.
var ErrKeyType = errors.New("keyset chunking cannot page on it exactly")

// LoadKey types the key columns pk (of the index named index) of
// schema.table and checks that keyset pagination on them is exact.
func LoadKey(ctx context.Context, q dbutil.Querier, schema, table, index string, pk []string) (Key, error) {
	if len(pk) == 0 {
		return Key{}, fmt.Errorf("table %s.%s has no key: chunking needs a primary key or a UNIQUE key over NOT NULL columns", schema, table)
	}
	cols, err := Probe(ctx, q, schema, table, pk)
	if err != nil {
		return Key{}, err
	}
	return NewKey(schema, table, index, cols)
}

// KeyAmong types the key pk (of the index named index) of schema.table from
// the table's probed columns cols, and says where each key column stands
// among them.
func KeyAmong(schema, table, index string, pk []string, cols []Column) (Key, []int, error) {
	pos := make([]int, len(pk))
	kc := make([]Column, len(pk))
	for i, name := range pk {
		pos[i] = -1
		for j, c := range cols {
			if c.Name == name {
				pos[i], kc[i] = j, c
				break
			}
		}
		if pos[i] < 0 {
			return Key{}, nil, fmt.Errorf("key column %s is not among the table's columns", name)
		}
	}
	k, err := NewKey(schema, table, index, kc)
	return k, pos, err
}

// NewKey builds a key of the index named index from typed columns,
// refusing types keyset cannot page on (ErrKeyType).
func NewKey(schema, table, index string, cols []Column) (Key, error) {
	if len(cols) == 0 {
		return Key{}, fmt.Errorf("table %s.%s has no key: chunking needs a primary key or a UNIQUE key over NOT NULL columns", schema, table)
	}
	for _, c := range cols {
		if !c.keyable() {
			return Key{}, fmt.Errorf("table %s.%s: column %s of key %s has type %s: %w", schema, table, c.Name, index, c.Type, ErrKeyType)
		}
	}
	return Key{Schema: schema, Table: table, Index: index, Cols: cols}, nil
}

// Names are the key's column names.
func (k Key) Names() []string {
	n := make([]string, len(k.Cols))
	for i, c := range k.Cols {
		n[i] = c.Name
	}
	return n
}

// Select is the select list that reads the key in its exact text form.
func (k Key) Select() string {
	e := make([]string, len(k.Cols))
	for i, c := range k.Cols {
		e[i] = c.Expr()
	}
	return strings.Join(e, ", ")
}

// OrderBy is the ORDER BY list: the key, ascending.
func (k Key) OrderBy() string { return dbutil.QuoteIdents(k.Names()) }

// Text converts raw key values (in key order) to their checkpoint form.
func (k Key) Text(raw [][]byte) []string {
	t := make([]string, len(k.Cols))
	for i, c := range k.Cols {
		t[i] = c.Text(raw[i])
	}
	return t
}

// Compare renders "key op text" (op is >, >=, < or <=) with its arguments.
func (k Key) Compare(op string, text []string) (string, []any, error) {
	vals, err := k.args(text)
	if err != nil {
		return "", nil, err
	}
	var args []any
	s := tuple(len(k.Cols), op, func(i int, op string) string {
		sql, a := k.Cols[i].compare(op, vals[i])
		args = append(args, a...)
		return sql
	})
	return s, args, nil
}

// maxInList is the most ENUM members a comparison lists: beyond it, a plain
// comparison of the index (exact, but the optimizer reads it as a filter).
const maxInList = 64

// compare renders "column op v" (op: >, >=, <, <=, =) with its arguments.
// An ENUM compared with a number compares its index, but the optimizer
// makes no range of it: it gets the list of indexes that satisfy op, which
// it does make ranges of.
func (c Column) compare(op string, v any) (string, []any) {
	name := dbutil.QuoteIdent(c.Name)
	if n, ok := v.(uint64); ok && c.Kind == Enum && c.Type != "SET" && op != "=" && len(c.Members) <= maxInList {
		var in []any
		for i := uint64(0); i <= uint64(len(c.Members)); i++ {
			if (op == ">" && i > n) || (op == ">=" && i >= n) || (op == "<" && i < n) || (op == "<=" && i <= n) {
				in = append(in, i)
			}
		}
		if len(in) == 0 {
			return "1=0", nil
		}
		return name + " IN (" + strings.TrimSuffix(strings.Repeat("?,", len(in)), ",") + ")", in
	}
	return name + " " + op + " " + c.Placeholder(), []any{v}
}

// Equal renders key = text (one row) with its arguments.
func (k Key) Equal(text []string) (string, []any, error) {
	args, err := k.args(text)
	if err != nil {
		return "", nil, err
	}
	parts := make([]string, len(k.Cols))
	for i, c := range k.Cols {
		parts[i] = dbutil.QuoteIdent(c.Name) + " = " + c.Placeholder()
	}
	return strings.Join(parts, " AND "), args, nil
}

// args turns a key's text values into the arguments the server compares.
func (k Key) args(text []string) ([]any, error) {
	if len(text) != len(k.Cols) {
		return nil, fmt.Errorf("table %s.%s: key bound %q has %d values, the key %d columns",
			k.Schema, k.Table, text, len(text), len(k.Cols))
	}
	vals := make([]any, len(text))
	for i, c := range k.Cols {
		v, err := c.Arg(text[i])
		if err != nil {
			return nil, fmt.Errorf("table %s.%s: key bound %s = %q: %w", k.Schema, k.Table, c.Name, text[i], err)
		}
		vals[i] = v
	}
	return vals, nil
}

// Range renders lo < key <= hi; a nil bound is open. Both open gives "1=1".
func (k Key) Range(lo, hi []string) (string, []any, error) {
	var parts []string
	var args []any
	if lo != nil {
		s, a, err := k.Compare(">", lo)
		if err != nil {
			return "", nil, err
		}
		parts, args = append(parts, s), append(args, a...)
	}
	if hi != nil {
		s, a, err := k.Compare("<=", hi)
		if err != nil {
			return "", nil, err
		}
		parts, args = append(parts, s), append(args, a...)
	}
	if len(parts) == 0 {
		return "1=1", nil, nil
	}
	return strings.Join(parts, " AND "), args, nil
}

// Tuple renders the row comparison (cols) op (ph) with op one of >, >=, <,
// <=, expanded so the optimizer sees a range on the first column:
//
//	(a,b) > (x,y)  →  (a >= x AND (a > x OR (a = x AND b > y)))
//
// cols are quoted identifiers and ph their placeholders. order gives, for each
// placeholder in the text, the index of the value it takes.
func Tuple(cols, ph []string, op string) (sql string, order []int) {
	sql = tuple(len(cols), op, func(i int, op string) string {
		order = append(order, i)
		return cols[i] + " " + op + " " + ph[i]
	})
	return sql, order
}

// tuple renders Tuple's expansion over n columns; cmp(i, op) renders column
// i compared by op (>, >=, <, <= or =) and is called in the text's order.
func tuple(n int, op string, cmp func(i int, op string) string) string {
	var lead, inner string
	switch op {
	case ">", ">=":
		lead, inner = ">=", ">"
	case "<", "<=":
		lead, inner = "<=", "<"
	default:
		panic("chunk.Tuple: unknown operator " + op)
	}
	if n == 1 {
		return cmp(0, op)
	}
	var b strings.Builder
	b.WriteString("(" + cmp(0, lead) + " AND (")
	for i := 0; i < n-1; i++ {
		b.WriteString(cmp(i, inner) + " OR (" + cmp(i, "=") + " AND ")
		if i < n-2 {
			b.WriteString("(")
		}
	}
	b.WriteString(cmp(n-1, op))
	b.WriteString(strings.Repeat(")", 2*n-3) + "))")
	return b.String()
}

// Upper returns the key of the n-th row, in key order, of those after `after`
// (nil: from the start) that match where; ok is false when fewer remain. It
// walks the primary key from `after` and stops there, so a filter that no
// index serves (MD5 of a column) still costs one pass over the table in all.
func Upper(ctx context.Context, q dbutil.Querier, k Key, after []string, where string, whereArgs []any, n int) (upper []string, ok bool, err error) {
	if n < 1 {
		n = 1
	}
	rng, args, err := k.Range(after, nil)
	if err != nil {
		return nil, false, err
	}
	query := "SELECT " + k.Select() + " FROM " + dbutil.Table(k.Schema, k.Table) + " FORCE INDEX (" + dbutil.QuoteIdent(k.Index) + ")" +
		" WHERE " + rng + " AND " + where + " ORDER BY " + k.OrderBy() + " LIMIT 1 OFFSET ?"
	args = append(append(args, whereArgs...), n-1)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, false, rows.Err()
	}
	raw, dest := dbutil.Dest[sql.RawBytes](len(k.Cols))
	if err := rows.Scan(dest...); err != nil {
		return nil, false, err
	}
	vals := make([][]byte, len(raw))
	for i, r := range raw {
		vals[i] = r
	}
	upper = k.Text(vals)
	return upper, true, rows.Close()
}
