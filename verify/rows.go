package verify

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
)

// What a differing row is.
const (
	SourceOnly = "source_only" // the key is on the source only
	TargetOnly = "target_only" // the key is on the target only
	Differs    = "differs"     // both sides have the key, with other values
)

// RowDiff is one row that differs between the sides: its primary key (in the
// key's column order, as text) and, when both sides have it, the columns
// whose values differ.
type RowDiff struct {
	Key     []string `json:"key"`
	Kind    string   `json:"kind"`
	Columns []string `json:"columns,omitempty"`
}

const defaultMaxRows = 100

// list names the rows of a differing chunk in c.Rows, at most MaxRows.
func (v *Verifier) list(ctx context.Context, sc *scope, c *Chunk) error {
	limit := v.MaxRows
	if limit <= 0 {
		limit = defaultMaxRows
	}
	c.KeyColumns = sc.key.Names()
	c.Rows, c.MoreRows = nil, 0
	return v.narrow(ctx, sc, *c, func(ds []RowDiff) error {
		for _, d := range ds {
			if len(c.Rows) < limit {
				c.Rows = append(c.Rows, d)
			} else {
				c.MoreRows++
			}
		}
		return nil
	})
}

// narrow finds the rows that differ in chunk c. Memory stays bounded by the
// chunk size whatever the target holds: the chunk's range is walked in
// sub-ranges that hold at most ChunkRows target rows (bounds found on the
// target) and so at most the chunk's source rows; each sub-range's target
// rows are held as per-column hashes while its source rows stream past in
// key order. fn gets each sub-range's differing rows: keys only on the
// source and keys whose values differ in source order, then keys only on
// the target in key order.
func (v *Verifier) narrow(ctx context.Context, sc *scope, c Chunk, fn func([]RowDiff) error) error {
	upTo, upArgs, err := sc.key.Range(nil, c.Hi)
	if err != nil {
		return err
	}
	within := upTo + " AND " + sc.where
	withinArgs := append(upArgs, sc.whereArgs...)
	tkey := sc.key
	tkey.Schema = v.TargetSchema
	lo := c.Lo
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi, more, err := chunk.Upper(ctx, sc.dst, tkey, lo, within, withinArgs, v.chunkRows())
		if err != nil {
			return fmt.Errorf("target: bound after key %q: %w", lo, err)
		}
		if !more {
			hi = c.Hi
		}
		ds, err := v.diffRange(ctx, sc, lo, hi)
		if err != nil {
			return err
		}
		if len(ds) > 0 {
			if err := fn(ds); err != nil {
				return err
			}
		}
		if !more {
			return nil
		}
		lo = hi
	}
}

func (v *Verifier) chunkRows() int {
	if v.ChunkRows > 0 {
		return v.ChunkRows
	}
	return defaultChunkRows
}

// held is one target row of a sub-range: its key and a hash per column.
type held struct {
	key  []string
	sums []uint64
	seen bool
}

// diffRange compares the rows with lo < key <= hi on both sides.
func (v *Verifier) diffRange(ctx context.Context, sc *scope, lo, hi []string) ([]RowDiff, error) {
	var target []held
	at := map[string]int{}
	err := v.scanRows(ctx, sc, sc.dst, v.TargetSchema, lo, hi, func(key []string, sums []uint64) error {
		at[strings.Join(key, "\x00")] = len(target)
		target = append(target, held{key: key, sums: sums})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	var out []RowDiff
	err = v.scanRows(ctx, sc, sc.src, v.SourceSchema, lo, hi, func(key []string, sums []uint64) error {
		i, ok := at[strings.Join(key, "\x00")]
		if !ok {
			out = append(out, RowDiff{Key: key, Kind: SourceOnly})
			return nil
		}
		target[i].seen = true
		var cols []string
		for j, s := range sums {
			if s != target[i].sums[j] {
				cols = append(cols, sc.cols[j].Name)
			}
		}
		if cols != nil {
			out = append(out, RowDiff{Key: key, Kind: Differs, Columns: cols})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	for _, h := range target {
		if !h.seen {
			out = append(out, RowDiff{Key: h.key, Kind: TargetOnly})
		}
	}
	return out, nil
}

// scanRows reads the rows lo < key <= hi of schema's table in key order,
// each as its key's text and one hash per column of its text form (the same
// form the chunk checksum reads; NULL hashes apart from every value).
func (v *Verifier) scanRows(ctx context.Context, sc *scope, q *sql.Conn, schema string, lo, hi []string, fn func(key []string, sums []uint64) error) error {
	rng, args, err := sc.key.Range(lo, hi)
	if err != nil {
		return err
	}
	exprs := make([]string, len(sc.cols))
	for i, c := range sc.cols {
		exprs[i] = c.Expr()
	}
	rows, err := q.QueryContext(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+dbutil.Table(schema, sc.key.Table)+
		" FORCE INDEX ("+dbutil.QuoteIdent(sc.key.Index)+") WHERE "+rng+" AND "+sc.where+" ORDER BY "+sc.key.OrderBy(), append(args, sc.whereArgs...)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	raw, dest := dbutil.Dest[sql.RawBytes](len(sc.cols))
	kraw := make([][]byte, len(sc.keyPos))
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		sums := make([]uint64, len(raw))
		for i, r := range raw {
			h := fnv.New64a()
			if r == nil {
				h.Write([]byte{0})
			} else {
				h.Write([]byte{1})
				h.Write(value(sc.json, i, r))
			}
			sums[i] = h.Sum64()
		}
		for i, p := range sc.keyPos {
			kraw[i] = raw[p]
		}
		if err := fn(sc.key.Text(kraw), sums); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Describe renders a row for people: its key as column=value pairs and what
// differs, with the source and target called src and dst.
func (d RowDiff) Describe(keyCols []string, src, dst string) string {
	kv := make([]string, len(d.Key))
	for i, k := range d.Key {
		if i < len(keyCols) {
			kv[i] = keyCols[i] + "=" + k
		} else {
			kv[i] = k
		}
	}
	key := strings.Join(kv, ",")
	switch d.Kind {
	case SourceOnly:
		return key + " only on the " + src
	case TargetOnly:
		return key + " only on the " + dst
	}
	return key + " differs in " + strings.Join(d.Columns, ", ")
}

// RowsText lists up to n of the chunk's named rows on one line, for messages.
func (c Chunk) RowsText(n int) string {
	var parts []string
	for i, r := range c.Rows {
		if i == n {
			break
		}
		parts = append(parts, r.Describe(c.KeyColumns, "source", "target"))
	}
	if more := int64(len(c.Rows)-len(parts)) + c.MoreRows; more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more rows", more))
	}
	return strings.Join(parts, "; ")
}

// Bounds renders the chunk's primary-key range (lo, hi] for people.
func (c Chunk) Bounds() string {
	l, h := "start", "end"
	if c.Lo != nil {
		l = strings.Join(c.Lo, ",")
	}
	if c.Hi != nil {
		h = strings.Join(c.Hi, ",")
	}
	return "(" + l + " .. " + h + "]"
}
