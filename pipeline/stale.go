package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// abortStale undoes only what a stale plan provably created: its copy at the
// target where no live shard owns it, and a location it registered that
// nothing uses. The shard map's mappings and the source are left alone (they
// belong to whatever changed the map since); what is kept is listed.
func abortStale(ctx context.Context, r *runner, why error) error {
	p := r.p
	kept := []string{"the shard map's mappings and the source were left as they are (" + why.Error() + ")"}
	if p.Step(plans.StepCreate).Attempts > 0 {
		if err := r.undoTargetCopy(ctx, "abort", &kept); err != nil {
			return err
		}
	}
	for _, c := range p.Abort {
		if c.Op != shardmap.OpRemoveLocation || c.ShardID <= 0 {
			continue
		}
		if err := r.env.Store.Apply(ctx, "abort "+p.ID+": remove the location it registered", []shardmap.Change{c}); err != nil {
			kept = append(kept, fmt.Sprintf("shard %d's location: %v", c.ShardID, err))
		}
	}
	if left, err := fence.Installed(ctx, r.src, p.Source.Schema); err == nil && len(left) > 0 {
		kept = append(kept, fmt.Sprintf("fence triggers on %s/%s (%s): they fail writes to fenced rows; resume or abort the plan that installed them, or drop them if none did",
			p.Source.Addr(), p.Source.Schema, strings.Join(left, ", ")))
	}
	p.AbortKept = kept
	p.State = plans.StateAborted
	return r.save(true)
}

// abortIfStale runs a stale plan's abort (abortStale) and reports whether it did.
func abortIfStale(ctx context.Context, r *runner) (bool, error) {
	err := interlock.CheckCurrent(ctx, r.env.Store, r.p)
	if errors.Is(err, ErrStale) {
		return true, abortStale(ctx, r, err)
	}
	return err != nil, err
}
