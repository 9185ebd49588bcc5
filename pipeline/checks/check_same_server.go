package checks

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
)

// A target that is the source's own schema would copy the shard onto itself.
func init() {
	register(Check{
		Name:  "target is not the source",
		Until: plans.StepCreate,
		Run: func(ctx context.Context, c *CheckEnv) error {
			p := c.Plan
			same, err := sameSchema(ctx, c.Src, c.Dst, p)
			if err != nil {
				return err
			}
			if same {
				return fmt.Errorf("%w: the target %s is the source server itself (same schema %s): choose another server", failure.ErrRefused, p.Target.Addr(), p.Target.Schema)
			}
			return nil
		},
	})
}

// sameSchema reports whether the plan's target is the source's own schema.
func sameSchema(ctx context.Context, src, dst *sql.DB, p *plans.Plan) (bool, error) {
	if p.Source.Schema != p.Target.Schema {
		return false, nil
	}
	same, err := sameServer(ctx, src, dst)
	if err != nil {
		return false, failure.ProbeError("the server identities", "source and target", p.Source.Addr()+" / "+p.Target.Addr(), err)
	}
	return same, nil
}

// sameServer reports whether two connections reach one server (under
// whatever addresses they were given).
func sameServer(ctx context.Context, a, b *sql.DB) (bool, error) {
	id := func(db *sql.DB) (string, error) {
		var sid, port, host string
		err := db.QueryRowContext(ctx, "SELECT @@server_id, @@port, @@hostname").Scan(&sid, &port, &host)
		return sid + "/" + port + "/" + host, err
	}
	x, err := id(a)
	if err != nil {
		return false, err
	}
	y, err := id(b)
	return x == y, err
}
