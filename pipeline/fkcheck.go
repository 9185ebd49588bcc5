package pipeline

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"

	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// foreignKeyProblems is the preflight check on foreign keys: a key that
// reaches into another schema, or (split, merge) a global table referencing a
// sharded one, is refused by its shape. Keys between sharded tables without
// the shard key are judged on the rows (fkdata.go). That is what makes the
// deletes of cleanup, prune and abort sound: they run with foreign key checks
// off (so no CASCADE reaches rows the operation does not own).
func foreignKeyProblems(ctx context.Context, src *sql.DB, p *plans.Plan) ([]string, error) {
	fks, err := tables.ForeignKeys(ctx, src, p.Source.Schema)
	if err != nil {
		return nil, err
	}
	refused, _ := tables.CrossingKeys(p.Copy, fks, p.Source.Schema, p.Operation)
	return refused, nil
}

// uniqueKeyHint names the statement that promotes a table's UNIQUE key over
// NOT NULL columns to its primary key, when it has one ("" otherwise).
func uniqueKeyHint(ctx context.Context, db *sql.DB, schema, table string) string {
	rows, err := db.QueryContext(ctx, `SELECT s.INDEX_NAME, s.COLUMN_NAME, c.IS_NULLABLE FROM information_schema.STATISTICS s
		JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME
		WHERE s.TABLE_SCHEMA = ? AND s.TABLE_NAME = ? AND s.NON_UNIQUE = 0 ORDER BY s.INDEX_NAME, s.SEQ_IN_INDEX`, schema, table)
	if err != nil {
		return ""
	}
	defer rows.Close()
	cols := map[string][]string{}
	nullable := map[string]bool{}
	var order []string
	for rows.Next() {
		var idx, col, null string
		if rows.Scan(&idx, &col, &null) != nil {
			return ""
		}
		if _, ok := cols[idx]; !ok {
			order = append(order, idx)
		}
		cols[idx] = append(cols[idx], col)
		nullable[idx] = nullable[idx] || null == "YES"
	}
	for _, idx := range order {
		if !nullable[idx] {
			return fmt.Sprintf("; its UNIQUE key %s is over NOT NULL columns: make it the primary key (ALTER TABLE %s ADD PRIMARY KEY (%s))",
				dbutil.QuoteIdent(idx), dbutil.Table(schema, table), dbutil.QuoteIdents(cols[idx]))
		}
	}
	return ""
}
