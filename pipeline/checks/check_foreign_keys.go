package checks

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/pipeline/fkcheck"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

func init() {
	register(Check{
		Name:  "foreign keys",
		Until: plans.StepCreate,
		Run: func(ctx context.Context, c *CheckEnv) error {
			problems, err := foreignKeyProblems(ctx, c.Src, c.Plan)
			if err != nil {
				return failure.ProbeError("the foreign keys", "source", c.Plan.Source.Addr(), err)
			}
			return refuse(problems)
		},
	})
	// A split reads the rows of the keys whose shape cannot tell, once at
	// planning; the verify step reads them again before the fence
	// (recheckKeys), since the application writes on meanwhile.
	register(Check{
		Name:  "foreign keys on the rows",
		Only:  func(o operation.Op) bool { return o.DividesKeys },
		Until: plans.StepCreate,
		Run: func(ctx context.Context, c *CheckEnv) error {
			if !c.Planning {
				return nil
			}
			p := c.Plan
			checks, crossing, err := fkcheck.CheckKeysOnData(ctx, c.Src, p, "planning", nil)
			if dbutil.IsMissingFunction(err) {
				return fmt.Errorf("%w: the source %s cannot compute the hash ranges (%v)%s", failure.ErrRefused, p.Source.Addr(), err, failure.ClassicHashingHint)
			}
			if err != nil {
				return failure.ProbeError("the rows of foreign keys without the shard key", "source", p.Source.Addr(), err)
			}
			p.KeyChecks = checks
			if crossing != "" {
				return fmt.Errorf("%w: %w: %s; re-key or fix those rows, or choose another split point", failure.ErrRefused, fkcheck.ErrCrossing, crossing)
			}
			return nil
		},
	})
}

// foreignKeyProblems is the check on foreign keys by their shape: a key that
// reaches into another schema, or (split, merge) a global table referencing a
// sharded one, is refused by its shape. Keys between sharded tables without
// the shard key are judged on the rows (pipeline/fkcheck). That is what makes the
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
