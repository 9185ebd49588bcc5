package tables

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/shardctl/shardctl/dbutil"
)

// candidate is a UNIQUE key that may identify a table's rows.
type candidate struct {
	table, index string
	cols         []string
	usable       bool   // every column NOT NULL, not FLOAT, whole (no prefix, no expression)
	charset      bool   // the first column is a character string
	firstType    string // the first column's DATA_TYPE
}

// intRank orders integer first columns narrowest first; anything else after.
var intRank = map[string]int{"tinyint": 0, "smallint": 1, "mediumint": 2, "int": 2, "bigint": 3}

func (c candidate) rank() int {
	r, ok := intRank[c.firstType]
	if !ok {
		r = 100
	}
	return r
}

// chooseUniqueKeys gives each table of byName that has no primary key the
// UNIQUE key that identifies its rows instead, chosen the way gh-ost chooses
// its shared key: only keys over NOT NULL columns (a NULL is never a
// duplicate), none FLOAT (its values do not compare exactly), whole columns;
// then a non-character first column, the narrowest integer first column,
// the fewest columns, and the name. A table with none keeps an empty PK.
func chooseUniqueKeys(ctx context.Context, db *sql.DB, schema string, byName map[string]*Table) error {
	var cands []candidate
	var table, index, null, dataType, charset string
	var col sql.NullString
	var prefix bool
	err := dbutil.ScanEach(ctx, db, `SELECT s.TABLE_NAME, s.INDEX_NAME, s.COLUMN_NAME, s.SUB_PART IS NOT NULL,
			COALESCE(c.IS_NULLABLE, 'YES'), COALESCE(c.DATA_TYPE, ''), COALESCE(c.CHARACTER_SET_NAME, '')
		FROM information_schema.STATISTICS s LEFT JOIN information_schema.COLUMNS c
			ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME
		WHERE s.TABLE_SCHEMA = ? AND s.NON_UNIQUE = 0 AND s.INDEX_NAME <> 'PRIMARY'
		ORDER BY s.TABLE_NAME, s.INDEX_NAME, s.SEQ_IN_INDEX`, []any{schema},
		[]any{&table, &index, &col, &prefix, &null, &dataType, &charset}, func() error {
			t := byName[table]
			if t == nil || len(t.PK) > 0 {
				return nil
			}
			n := len(cands)
			if n == 0 || cands[n-1].table != table || cands[n-1].index != index {
				cands = append(cands, candidate{table: table, index: index, usable: true, charset: charset != "", firstType: dataType})
				n++
			}
			c := &cands[n-1]
			c.cols = append(c.cols, col.String)
			if !col.Valid || prefix || null != "NO" || dataType == "float" {
				c.usable = false
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("list unique keys of %s: %w", schema, err)
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		switch {
		case a.table != b.table:
			return a.table < b.table
		case a.usable != b.usable:
			return a.usable
		case a.charset != b.charset:
			return !a.charset
		case a.rank() != b.rank():
			return a.rank() < b.rank()
		case len(a.cols) != len(b.cols):
			return len(a.cols) < len(b.cols)
		}
		return a.index < b.index
	})
	for _, c := range cands {
		if t := byName[c.table]; c.usable && len(t.PK) == 0 {
			t.PK, t.Key = c.cols, c.index
		}
	}
	return nil
}
