// Package tables describes the tables of a shard schema as the pipeline sees
// them: columns in order, primary key, row estimate, and the filter that says
// which rows an operation moves.
package tables

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/tables/tabledef"
)

// Table is one table of a shard schema (defined in tabledef, which needs no database).
type Table = tabledef.Table

// Find returns the table named name.
func Find(ts []Table, name string) (Table, bool) { return tabledef.Find(ts, name) }

// Inspect reads every base table of schema from information_schema, in name order.
// A table without a primary key gets the columns of the UNIQUE key that
// stands in for one as PK (and its name as Key); a table without either is
// returned with an empty PK, which callers refuse.
func Inspect(ctx context.Context, db *sql.DB, schema string) ([]Table, error) {
	rows, err := db.QueryContext(ctx, `SELECT TABLE_NAME, COALESCE(TABLE_ROWS,0), COALESCE(DATA_LENGTH,0)+COALESCE(INDEX_LENGTH,0)
		FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' AND TABLE_NAME <> ? ORDER BY TABLE_NAME`, schema, dbutil.FenceTable)
	if err != nil {
		return nil, fmt.Errorf("list tables of %s: %w", schema, err)
	}
	var out []Table
	byName := map[string]*Table{}
	for rows.Next() {
		var t Table
		if err := rows.Scan(&t.Name, &t.EstRows, &t.EstBytes); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		byName[out[i].Name] = &out[i]
	}
	cols, err := db.QueryContext(ctx, `SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME, ORDINAL_POSITION`, schema)
	if err != nil {
		return nil, fmt.Errorf("list columns of %s: %w", schema, err)
	}
	for cols.Next() {
		var tn, cn string
		if err := cols.Scan(&tn, &cn); err != nil {
			cols.Close()
			return nil, err
		}
		if t := byName[tn]; t != nil {
			t.Columns = append(t.Columns, cn)
		}
	}
	cols.Close()
	pk, err := db.QueryContext(ctx, `SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
		WHERE TABLE_SCHEMA = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY TABLE_NAME, ORDINAL_POSITION`, schema)
	if err != nil {
		return nil, fmt.Errorf("list primary keys of %s: %w", schema, err)
	}
	for pk.Next() {
		var tn, cn string
		if err := pk.Scan(&tn, &cn); err != nil {
			pk.Close()
			return nil, err
		}
		if t := byName[tn]; t != nil {
			t.PK = append(t.PK, cn)
		}
	}
	pk.Close()
	if err := chooseUniqueKeys(ctx, db, schema, byName); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
