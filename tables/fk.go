package tables

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/shardctl/shardctl/operation"
)

// ForeignKey is one foreign key of a shard schema: Table(Columns) references
// RefSchema.RefTable(RefColumns).
type ForeignKey struct {
	Name       string
	Table      string
	Columns    []string
	RefSchema  string
	RefTable   string
	RefColumns []string
	OnDelete   string // CASCADE, SET NULL, RESTRICT, NO ACTION, SET DEFAULT
	OnUpdate   string
}

// Cascades reports whether deleting a parent row changes child rows.
func (k ForeignKey) Cascades() bool { return k.OnDelete == "CASCADE" || k.OnDelete == "SET NULL" }

func (k ForeignKey) String() string {
	return fmt.Sprintf("%s.%s (%s) -> %s.%s (%s)", k.Table, k.Name, strings.Join(k.Columns, ", "), k.RefSchema, k.RefTable, strings.Join(k.RefColumns, ", "))
}

// ForeignKeys reads the foreign keys declared by the tables of schema: the
// one reader of foreign keys (delete order, cascades, preflight).
func ForeignKeys(ctx context.Context, db *sql.DB, schema string) ([]ForeignKey, error) {
	rows, err := db.QueryContext(ctx, `SELECT k.CONSTRAINT_NAME, k.TABLE_NAME, k.COLUMN_NAME, k.REFERENCED_TABLE_SCHEMA, k.REFERENCED_TABLE_NAME,
			k.REFERENCED_COLUMN_NAME, r.DELETE_RULE, r.UPDATE_RULE
		FROM information_schema.KEY_COLUMN_USAGE k
		JOIN information_schema.REFERENTIAL_CONSTRAINTS r
		  ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME AND r.TABLE_NAME = k.TABLE_NAME
		WHERE k.TABLE_SCHEMA = ? AND k.REFERENCED_TABLE_NAME IS NOT NULL
		ORDER BY k.TABLE_NAME, k.CONSTRAINT_NAME, k.ORDINAL_POSITION`, schema)
	if err != nil {
		return nil, fmt.Errorf("read foreign keys of %s: %w", schema, err)
	}
	defer rows.Close()
	var out []ForeignKey
	for rows.Next() {
		var k ForeignKey
		var col, ref string
		if err := rows.Scan(&k.Name, &k.Table, &col, &k.RefSchema, &k.RefTable, &ref, &k.OnDelete, &k.OnUpdate); err != nil {
			return nil, fmt.Errorf("read foreign keys of %s: %w", schema, err)
		}
		if n := len(out); n > 0 && out[n-1].Table == k.Table && out[n-1].Name == k.Name {
			out[n-1].Columns = append(out[n-1].Columns, col)
			out[n-1].RefColumns = append(out[n-1].RefColumns, ref)
			continue
		}
		k.Columns, k.RefColumns = []string{col}, []string{ref}
		out = append(out, k)
	}
	return out, rows.Err()
}

// DeleteOrder returns ts ordered so that every table comes before the tables
// its rows reference (children before parents) within schema; tables in a
// reference cycle keep their relative order. Deleting in this order never
// deletes a parent row while a child row that names it remains.
func DeleteOrder(ts []Table, fks []ForeignKey, schema string) []Table {
	idx := map[string]int{}
	for i, t := range ts {
		idx[t.Name] = i
	}
	// parents[c] = tables c references (edges child -> parent).
	children := map[string]map[string]bool{}
	for _, k := range fks {
		if k.RefSchema != schema || k.Table == k.RefTable {
			continue
		}
		if _, ok := idx[k.Table]; !ok {
			continue
		}
		if _, ok := idx[k.RefTable]; !ok {
			continue
		}
		if children[k.RefTable] == nil {
			children[k.RefTable] = map[string]bool{}
		}
		children[k.RefTable][k.Table] = true
	}
	// Depth-first: a table is placed once every child of it is placed.
	placed := map[string]bool{}
	visiting := map[string]bool{}
	var out []Table
	var visit func(name string)
	visit = func(name string) {
		if placed[name] || visiting[name] {
			return
		}
		visiting[name] = true
		var cs []string
		for c := range children[name] {
			cs = append(cs, c)
		}
		sort.Slice(cs, func(i, j int) bool { return idx[cs[i]] < idx[cs[j]] })
		for _, c := range cs {
			visit(c)
		}
		visiting[name] = false
		placed[name] = true
		out = append(out, ts[idx[name]])
	}
	for _, t := range ts {
		visit(t.Name)
	}
	return out
}

// CascadingParents names the tables of schema whose row deletes change other
// rows through ON DELETE CASCADE or SET NULL.
func CascadingParents(fks []ForeignKey, schema string) map[string]bool {
	out := map[string]bool{}
	for _, k := range fks {
		if k.RefSchema == schema && k.Cascades() {
			out[k.RefTable] = true
		}
	}
	return out
}

// CrossingKeys sorts the foreign keys of a shard schema for an operation op
// (move, split or merge). refused are the keys it cannot carry, each saying
// what to do: a key reaching outside the shard's schema (the target does not
// have it), and for split and merge a global table referencing a sharded one
// (its rows would name rows of another shard). onData are the keys between
// sharded tables that do not carry the shard key: a split is safe for them
// only if no child row and its parent end on two sides of the split point,
// which only the rows can tell (Sakila's payment -> rental, an order line ->
// its order). A move and a merge keep every child with its parent, so they
// check nothing more. ts are the shard's tables with Sharded and ShardColumn set.
func CrossingKeys(ts []Table, fks []ForeignKey, schema, op string) (refused []string, onData []ForeignKey) {
	o := operation.Of(op)
	byName := map[string]Table{}
	for _, t := range ts {
		byName[t.Name] = t
	}
	for _, k := range fks {
		if k.RefSchema != schema {
			refused = append(refused, fmt.Sprintf("foreign key %s references another schema (%s): the target does not have it; drop the key or keep the referenced table in the shard schema", k, k.RefSchema))
			continue
		}
		if o.WholeSchema {
			continue
		}
		child, parent := byName[k.Table], byName[k.RefTable]
		switch {
		case !child.Sharded && parent.Sharded:
			refused = append(refused, fmt.Sprintf("foreign key %s makes global table %s reference sharded table %s: its rows would name rows of another shard after the operation; drop the key (ALTER TABLE %s DROP FOREIGN KEY %s) or shard %s too",
				k, k.Table, k.RefTable, k.Table, k.Name, k.Table))
		case child.Sharded && parent.Sharded && o.DividesKeys && !carriesShardKey(k, child, parent):
			onData = append(onData, k)
		}
	}
	return refused, onData
}

// carriesShardKey reports whether the key maps the child's shard column onto
// the parent's: then a child and its parent always have the same shard key.
func carriesShardKey(k ForeignKey, child, parent Table) bool {
	i := slices.Index(k.Columns, child.ShardColumn)
	return i >= 0 && k.RefColumns[i] == parent.ShardColumn
}
