package pipeline

// The end of a reverse window that leaves the source serving: the target
// copy goes, once the shard map is seen pointing at the source.

import (
	"context"
	"fmt"

	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/schemaobj"
)

// dropTargetCopy is the cleanup of a window that ended with the source
// serving: the target copy goes, once the shard map is seen pointing at the source.
func (r *runner) dropTargetCopy(ctx context.Context) error {
	m, err := r.env.Store.Load(ctx)
	if err != nil {
		return err
	}
	if err := interlock.RoutesToSource(m, r.p); err != nil {
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
		trig, err := triggersOn(ctx, r.dst, r.p.Target.Schema, window.Tables(r.p))
		if err != nil {
			return err
		}
		if err := schemaobj.Replace(ctx, r.dst, r.p.Target.Schema, r.p.Target.Schema, trig, false); err != nil {
			return fmt.Errorf("reverse window: restore the target's triggers: %w", err)
		}
		return fence.Remove(ctx, r.dst, r.p.Target.Schema, fence.Names(window.Fence(r.p, plans.SideTarget)), lockWait)
	}
	return nil
}
