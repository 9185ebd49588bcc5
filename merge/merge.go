// Package merge plans merging shard S into its neighbour T: S's rows of the
// sharded tables are copied into T's existing schema (global tables are
// already there), S's mapping is re-pointed to T and merged with T's, and S's
// schema and location are removed.
package merge

import (
	"context"
	"fmt"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// Request is what the operator asked for.
type Request struct {
	ShardID int // S, the shard that goes away
	Into    int // T, the neighbour that receives its rows
	Options plans.Options
}

// Plan builds and preflights a merge plan (the preflight includes the key collision scan, pipeline/checks/check_collisions.go). It changes nothing.
// Long on purpose: the three map types' cutover changes sit side by side in
// one switch, so RANGE, HASH and LIST read against each other.
func Plan(ctx context.Context, env pipeline.Env, req Request) (*plans.Plan, error) {
	if req.ShardID == req.Into {
		return nil, fmt.Errorf("%w: cannot merge shard %d into itself", shardmap.ErrBadInput, req.ShardID)
	}
	env = pipeline.WithPools(env)
	defer env.Pools.Close()
	m, src, err := pipeline.Shard(ctx, env, req.ShardID)
	if err != nil {
		return nil, err
	}
	_, dst, err := pipeline.Shard(ctx, env, req.Into)
	if err != nil {
		return nil, err
	}
	sm, tm := m.ShardMappings(req.ShardID), m.ShardMappings(req.Into)
	if len(sm) == 0 || len(tm) == 0 {
		return nil, fmt.Errorf("%w: merge works on shards with mappings (shard %d has %d, shard %d has %d)", shardmap.ErrBadInput, req.ShardID, len(sm), req.Into, len(tm))
	}
	s, t := sm[0], tm[0]
	for _, mp := range append(sm[1:], tm...) {
		if mp.FuncID != s.FuncID {
			return nil, fmt.Errorf("%w: shards %d and %d belong to different partition functions", shardmap.ErrBadInput, req.ShardID, req.Into)
		}
	}
	f, err := m.FunctionByID(s.FuncID)
	if err != nil {
		return nil, err
	}
	// A LIST shard has a point per key; a RANGE or HASH shard merges one
	// range or arc into its neighbour's.
	if f.Type != shardmap.List && (len(sm) != 1 || len(tm) != 1) {
		return nil, fmt.Errorf("%w: merge works on shards with exactly one mapping each (shard %d has %d, shard %d has %d)", shardmap.ErrBadInput, req.ShardID, len(sm), req.Into, len(tm))
	}
	p := plans.New(operation.Merge, "")
	var owned keyspace.Filter
	sref := s.Ref()
	switch f.Type {
	case shardmap.Range:
		var later shardmap.Ref // the mapping whose lower bound disappears
		switch {
		case s.Upper != nil && s.Upper.Compare(*t.Lower) == 0:
			later = t.Ref()
		case t.Upper != nil && t.Upper.Compare(*s.Lower) == 0:
			later = s.Ref()
		default:
			return nil, fmt.Errorf("%w: shard %d's range %s and shard %d's range %s are not adjacent; only neighbouring ranges merge", shardmap.ErrBadInput, req.ShardID, s, req.Into, t)
		}
		owned = keyspace.Filter{Ranges: []keyspace.Range{{Lo: s.Lower, Hi: s.Upper}}}
		p.Cutover = []shardmap.Change{{Op: shardmap.OpRepoint, Ref: sref, ShardID: req.Into}, {Op: shardmap.OpSetStatus, Ref: sref, Status: shardmap.Online}, {Op: shardmap.OpMergeRange, Ref: later}}
		p.Summary = fmt.Sprintf("merge shard %d (%s, %s) into shard %d (%s, %s)", req.ShardID, src.Schema, s, req.Into, dst.Schema, t)
	case shardmap.Hash:
		var points []string
		for _, o := range m.MappingsOf(f.ID) {
			points = append(points, o.Hash)
		}
		arc := keyspace.ArcOf(points, s.Hash)
		// Without S's point its arc belongs to the point below it: that must be T's.
		if pred := keyspace.Owner(points, s.Hash); points[pred] != t.Hash {
			return nil, fmt.Errorf("%w: shard %d's ring point %s does not follow shard %d's point on the ring; its arc would go to another shard", shardmap.ErrBadInput, req.ShardID, s.Hash, req.Into)
		}
		owned = keyspace.Filter{Arcs: []keyspace.Arc{arc}}
		p.Cutover = []shardmap.Change{{Op: shardmap.OpRemoveMapping, Ref: sref}}
		p.Summary = fmt.Sprintf("merge shard %d (%s, arc (%s, %s]) into shard %d (%s)", req.ShardID, src.Schema, arc.After, arc.Upto, req.Into, dst.Schema)
	case shardmap.List:
		// Any two shards of a LIST function merge: S's points are re-pointed
		// to T together (one statement each phase).
		for _, mp := range sm {
			owned.Points = append(owned.Points, *mp.Point)
		}
		sref = shardmap.Ref{FuncID: f.ID, Kind: shardmap.List, Points: owned.Points}
		p.Cutover = []shardmap.Change{{Op: shardmap.OpRepoint, Ref: sref, ShardID: req.Into}, {Op: shardmap.OpSetStatus, Ref: sref, Status: shardmap.Online}}
		p.Summary = fmt.Sprintf("merge shard %d (%s, %d keys) into shard %d (%s)", req.ShardID, src.Schema, len(sm), req.Into, dst.Schema)
	default:
		return nil, fmt.Errorf("%w: merge of %s shards is not supported", shardmap.ErrBadInput, f.Type)
	}
	ts, err := pipeline.Inspect(ctx, env, m, src)
	if err != nil {
		return nil, err
	}
	pipeline.Skeleton(env, p, src, plans.Endpoint{ShardID: req.Into, Host: dst.Host, Port: dst.Port, Schema: dst.Schema}, req.Options, req.ShardID, req.Into)
	p.Args = map[string]string{"shard": fmt.Sprint(req.ShardID), "into": fmt.Sprint(req.Into)}
	p.Offline = []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: sref, Status: shardmap.Offline}}
	p.Abort = []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: sref, Status: shardmap.Online}}
	p.DropSourceSchema = true
	p.AfterCleanup = []shardmap.Change{{Op: shardmap.OpRemoveLocation, ShardID: req.ShardID}}
	for _, tb := range ts {
		p.Cleanup = append(p.Cleanup, tb) // the whole source schema goes
		p.Fence = append(p.Fence, plans.FenceTable{Name: tb.Name})
		if !tb.Sharded {
			continue // global tables: T has its own copy
		}
		tb.Filter = owned
		tb.Filter.Column = tb.ShardColumn
		p.Copy = append(p.Copy, tb)
		p.AbortTarget = append(p.AbortTarget, tb)
	}
	if len(p.Copy) == 0 {
		return nil, fmt.Errorf("%w: shard %d has no sharded tables to merge", shardmap.ErrBadInput, req.ShardID)
	}
	if err := pipeline.Finish(ctx, env, p); err != nil {
		return nil, err
	}
	return p, nil
}
