package checks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
)

func init() {
	register(Check{
		Name:  "row keys",
		Until: plans.StepCreate,
		Run: func(ctx context.Context, c *CheckEnv) error {
			problems, err := keyProblems(ctx, c.Src, c.Plan)
			if err != nil {
				return failure.ProbeError("the tables' keys", "source", c.Plan.Source.Addr(), err)
			}
			return refuse(problems)
		},
	})
}

// keyProblems is the check on the keys rows are identified by:
// copy, verify, cleanup and prune page by a table's key and the tail applies
// by it, so a table without one, or with one keyset chunking cannot page on
// exactly, is refused here, before anything is written, not when the copy
// reaches it.
func keyProblems(ctx context.Context, src *sql.DB, p *plans.Plan) ([]string, error) {
	var problems []string
	for _, t := range p.Copy {
		if len(t.PK) == 0 {
			problems = append(problems, fmt.Sprintf("table %s.%s has no primary key and no UNIQUE key over NOT NULL columns (none FLOAT or a prefix) to identify its rows: add a primary key", p.Source.Schema, t.Name))
			continue
		}
		if _, err := chunk.LoadKey(ctx, src, p.Source.Schema, t.Name, t.Index(), t.PK); err != nil {
			if !errors.Is(err, chunk.ErrKeyType) {
				return nil, err
			}
			problems = append(problems, err.Error()+": identify its rows by another key")
		}
	}
	return problems, nil
}
