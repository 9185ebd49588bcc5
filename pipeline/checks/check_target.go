package checks

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/throttle"
)

// The target schema must be free before the create step. One check with
// the most specific refusal first: a live shard's schema, or another
// unfinished plan's target copy, must never be dropped, so only a schema
// that is neither is refused with "drop it or choose another target".
func init() {
	register(Check{
		Name:  "target is free",
		Until: plans.StepCreate,
		Run: func(ctx context.Context, c *CheckEnv) error {
			p := c.Plan
			if err := replicaTarget(ctx, c); err != nil {
				return err
			}
			if err := reservedTarget(ctx, c); err != nil {
				return err
			}
			if id := interlock.LiveAtTarget(c.Map, p); id > 0 {
				return fmt.Errorf("%w: shard %d lives at the target %s/%s (it is in the shard map with mappings): choose another target server or schema; never drop it", failure.ErrRefused, id, p.Target.Addr(), p.Target.Schema)
			}
			if err := otherPlansCopy(ctx, c); err != nil {
				return err
			}
			return targetSchemaNew(ctx, c)
		},
	})
}

// systemSchemas belong to the server; names compare case-insensitively, as
// information_schema's does (and "MySQL" beside "mysql" only confuses).
var systemSchemas = []string{"mysql", "information_schema", "performance_schema", "sys"}

// replicaTarget refuses a target server that replicates from another: rows
// written there are errant transactions its source lacks, lost at the
// replica's next re-clone or failover, and its schemas (the shard's own
// replicated copy, for a move to a replica of the shard's server) are its
// source's, never a schema to drop. Every operation's target is checked,
// a merge's and a key move's existing shard included.
func replicaTarget(ctx context.Context, c *CheckEnv) error {
	if c.Dst == nil {
		return nil
	}
	t := c.Plan.Target
	src, err := throttle.SourceOf(ctx, c.Dst)
	if err != nil {
		return failure.ProbeError("the replication status", "target", t.Addr(), err)
	}
	if src == "" {
		return nil
	}
	return fmt.Errorf("%w: the target server %s is a replica of %s: a shard written there would hold transactions its source lacks and be lost at the replica's next re-clone or failover; choose as the target a server that replicates from nobody (a primary)",
		failure.ErrRefused, t.Addr(), src)
}

// reservedTarget refuses a target schema that is the server's own or the
// sharding database's: it can never hold a shard, and the operator must not
// be told to drop it.
func reservedTarget(ctx context.Context, c *CheckEnv) error {
	t := c.Plan.Target
	for _, s := range systemSchemas {
		if strings.EqualFold(t.Schema, s) {
			return fmt.Errorf("%w: the target schema %s on %s is the server's own system schema, never a shard's: choose another target schema (--schema)", failure.ErrRefused, t.Schema, t.Addr())
		}
	}
	if c.Dst == nil {
		return nil
	}
	if c.Store != nil && t.Schema == c.Store.Schema {
		same, err := sameServer(ctx, c.Store.DB, c.Dst)
		if err != nil {
			return failure.ProbeError("the server identities", "sharding database and target", t.Addr(), err)
		}
		if same {
			return fmt.Errorf("%w: the target schema %s on %s is the sharding database (the shard map), never a shard's: choose another target schema (--schema)", failure.ErrRefused, t.Schema, t.Addr())
		}
	}
	isMap, held, err := shardmap.HoldsMap(ctx, c.Dst, t.Schema)
	if err != nil {
		return failure.ProbeError("the target schema's tables", "target", t.Addr(), err)
	}
	if isMap {
		return fmt.Errorf("%w: the target schema %s on %s is a sharding database (it holds a shard map's tables: %s), another fleet's or an older one, never a shard's: choose another target schema (--schema)",
			failure.ErrRefused, t.Schema, t.Addr(), strings.Join(held, ", "))
	}
	return nil
}

// otherPlansCopy refuses a target schema that is another unfinished plan's
// target copy (a move running or stopped there): dropping it would pull the
// copy from under that plan.
func otherPlansCopy(ctx context.Context, c *CheckEnv) error {
	if c.Store == nil || c.Dst == nil {
		return nil
	}
	// Only a copy that exists can be pulled away (an operator may have
	// dropped a stale plan's half copy and moved there anew).
	if ok, err := dbutil.SchemaExists(ctx, c.Dst, c.Plan.Target.Schema); err != nil || !ok {
		return err
	}
	others, err := planstore.New(c.Store.DB, c.Store.Schema).Unfinished(ctx)
	if err != nil {
		return err
	}
	t := c.Plan.Target
	for _, o := range others {
		if o.ID == c.Plan.ID || o.Target.Host != t.Host || o.Target.Port != t.Port || o.Target.Schema != t.Schema {
			continue
		}
		return fmt.Errorf("%w: the target %s/%s is the target copy of plan %s (%s, next step %s): let that plan finish, or abort it ('shardctl plan abort %s'), which removes the copy",
			failure.ErrRefused, t.Addr(), t.Schema, o.ID, o.State, o.NextStep(), o.ID)
	}
	return nil
}

// targetSchemaNew refuses, for a move or split (which create their target
// schema, and drop it on abort), a target schema that already holds tables.
func targetSchemaNew(ctx context.Context, c *CheckEnv) error {
	p := c.Plan
	if !p.DropTargetSchema {
		return nil
	}
	if same, err := sameSchema(ctx, c.Src, c.Dst, p); err != nil || same {
		return err // the same schema is the refusal of "target is not the source"
	}
	var n int
	if err := c.Dst.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", p.Target.Schema).Scan(&n); err != nil {
		return failure.ProbeError("the target schema's tables", "target", p.Target.Addr(), err)
	}
	if n == 0 {
		return nil
	}
	var rows int64
	ts, _ := tables.Inspect(ctx, c.Dst, p.Target.Schema)
	for _, t := range ts {
		rows += t.EstRows
	}
	return fmt.Errorf("%w: the target schema %s on %s exists with %d tables (about %d rows): drop it or choose another target", failure.ErrRefused, p.Target.Schema, p.Target.Addr(), n, rows)
}
