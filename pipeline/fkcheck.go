package pipeline

import (
	"context"
	"database/sql"

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
