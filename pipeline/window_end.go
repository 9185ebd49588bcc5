package pipeline

// The end of a reverse window that leaves the source serving: the target
// copy goes, once the shard map is seen pointing at the source.

import (
	"context"
	"fmt"

	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/shardmap"
)

// dropTargetCopy is the cleanup of a window that ended with the source
// serving: the target copy goes, once the shard map is seen pointing at the source.
func (r *runner) dropTargetCopy(ctx context.Context) error {
	m, err := r.env.Store.Load(ctx)
	if err != nil {
		return err
	}
	if err := routesToSource(m, r.p); err != nil {
		return fmt.Errorf("refusing to remove the target copy %s on %s: %w", r.p.Target.Schema, r.p.Target.Addr(), err)
	}
	// The plan's abort changes undo what the operation added to the shard
	// map (a split's mapping split and new location); a move's only set online.
	if err := r.env.Store.Apply(ctx, "reverse window: undo the shard-map changes of "+r.p.ID, r.p.Abort); err != nil {
		return err
	}
	if err := fence.Remove(ctx, r.src, r.p.Source.Schema, fenceNames(r.p), r.p.Options.LockWaitMS.D()); err != nil {
		return err
	}
	if err := r.undoTargetCopy(ctx, "reverse window", nil); err != nil {
		return err
	}
	if !r.p.DropTargetSchema {
		// merge: the target is a live shard (only the merged range's rows went).
		lockWait := r.p.Options.LockWaitMS.D()
		// The target keeps living: its triggers, guarded while it did not
		// serve, get their exact definitions back.
		trig, err := triggersOn(ctx, r.dst, r.p.Target.Schema, windowTables(r.p))
		if err != nil {
			return err
		}
		if err := schemaobj.Replace(ctx, r.dst, r.p.Target.Schema, r.p.Target.Schema, trig, false); err != nil {
			return fmt.Errorf("reverse window: restore the target's triggers: %w", err)
		}
		return fence.Remove(ctx, r.dst, r.p.Target.Schema, names(windowFence(r.p, plans.SideTarget)), lockWait)
	}
	return nil
}

// routesToSource checks that the shard map sends the moved rows to the
// source: the location back at the source server (move), the moved range or
// ring point at the source shard (split, merge).
func routesToSource(m *shardmap.Map, p *plans.Plan) error {
	for _, c := range p.Window.Revert {
		switch c.Op {
		case shardmap.OpMoveLocation:
			loc, err := m.Location(p.Source.ShardID)
			if err != nil {
				return err
			}
			if loc.Host != p.Source.Host || loc.Port != p.Source.Port {
				return fmt.Errorf("the shard map points shard %d at %s, not at the source %s", loc.ShardID, loc.Addr(), p.Source.Addr())
			}
		case shardmap.OpRepoint:
			ok := false
			for _, mp := range m.ShardMappings(p.Source.ShardID) {
				r := mp.Ref()
				ok = ok || r.FuncID == c.Ref.FuncID && r.Kind == c.Ref.Kind && r.Hash == c.Ref.Hash &&
					(r.Lower == nil) == (c.Ref.Lower == nil) && (r.Lower == nil || r.Lower.Compare(*c.Ref.Lower) == 0)
			}
			if !ok {
				return fmt.Errorf("the moved mapping does not point at shard %d", p.Source.ShardID)
			}
		}
	}
	return nil
}
