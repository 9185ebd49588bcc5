// Package move plans moving a whole shard (its schema) to another server:
// every row of every table is copied and tailed, the whole schema is fenced,
// the cutover re-points the shard's location, and cleanup drops the source.
package move

import (
	"context"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// Request is what the operator asked for.
type Request struct {
	ShardID    int
	To         dbutil.Addr
	KeepSource bool
	Options    plans.Options
}

// Plan builds and preflights the plan. It changes nothing.
func Plan(ctx context.Context, env pipeline.Env, req Request) (*plans.Plan, error) {
	env = pipeline.WithPools(env)
	defer env.Pools.Close()
	m, loc, err := pipeline.Shard(ctx, env, req.ShardID)
	if err != nil {
		return nil, err
	}
	mappings := m.ShardMappings(req.ShardID)
	if len(mappings) == 0 {
		return nil, fmt.Errorf("%w: shard %d has no mappings in the shard map; nothing routes to it", shardmap.ErrBadInput, req.ShardID)
	}
	ts, err := pipeline.Inspect(ctx, env, m, loc)
	if err != nil {
		return nil, err
	}
	p := plans.New(operation.Move, fmt.Sprintf("move shard %d (%s) from %s to %s", req.ShardID, loc.Schema, loc.Addr(), req.To))
	pipeline.Skeleton(env, p, loc, plans.Endpoint{ShardID: req.ShardID, Host: req.To.Host, Port: req.To.Port, Schema: loc.Schema}, req.Options, req.ShardID)
	p.Args = map[string]string{"shard": fmt.Sprint(req.ShardID), "to": req.To.String()}
	p.Copy = ts
	p.Cleanup = ts // empty filters: every row
	for _, t := range ts {
		p.Fence = append(p.Fence, plans.FenceTable{Name: t.Name})
	}
	for _, mp := range mappings {
		p.Offline = append(p.Offline, shardmap.Change{Op: shardmap.OpSetStatus, Ref: mp.Ref(), Status: shardmap.Offline})
		p.Abort = append(p.Abort, shardmap.Change{Op: shardmap.OpSetStatus, Ref: mp.Ref(), Status: shardmap.Online})
	}
	p.Cutover = append([]shardmap.Change{{Op: shardmap.OpMoveLocation, ShardID: req.ShardID, Host: req.To.Host, Port: req.To.Port}}, p.Abort...)
	p.DropSourceSchema = true
	p.DropTargetSchema = true
	p.KeepSource = req.KeepSource
	if err := pipeline.Finish(ctx, env, p); err != nil {
		return nil, err
	}
	return p, nil
}
