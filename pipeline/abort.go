package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/shardmap"
)

// undoAdvice is the operation that undoes a plan that has cut over, as a
// command that runs as printed (issue 53): a move moves back, keys moved
// into a neighbour move back by name, LIST keys moved onto a new shard merge
// back, a split's new shard merges into the one it left, a RANGE or HASH
// merge splits again at the boundary it removed and a LIST merge splits its
// keys back out. A plan still cleaning up finishes first: until then the
// old copy is in the way of the way back.
func undoAdvice(p *plans.Plan) string {
	var back string
	op := operation.Of(p.Operation)
	moved := movedKeys(p)
	switch {
	case op.WholeSchema:
		back = fmt.Sprintf("move the shard back: shardctl move --shard %d --to %s", p.Source.ShardID, p.Source.Addr())
	case p.Args["keys"] != "" && (op.IntoExisting || len(moved.Points) == 0):
		flag, _ := keyspace.KeysFlag(moved) // a key move's keys are points or bounded ranges
		back = fmt.Sprintf("move the %s back: shardctl move --shard %d %s --into %d", p.Args["keys"], p.Target.ShardID, flag, p.Source.ShardID)
	case op.IntoExisting && len(moved.Points) > 0:
		back = fmt.Sprintf("split the %d keys shard %d took back out to a shard of their own: shardctl split --shard %d --keys %s --to %s --schema %s",
			len(moved.Points), p.Target.ShardID, p.Target.ShardID, keyspace.KeyListArg(moved.Points), p.Source.Addr(), p.Source.Schema)
	case op.IntoExisting:
		// The boundary the merge removed: a range's lower bound, or the ring
		// point whose arc went to the neighbour (a split there gives it back).
		at := ""
		for _, c := range p.Cutover {
			switch {
			case c.Op == shardmap.OpMergeRange && c.Ref.Lower != nil:
				at = " --at " + keyspace.ShellWord(c.Ref.Lower.String())
			case c.Op == shardmap.OpRemoveMapping && c.Ref.Hash != "":
				at = " --at-hash " + c.Ref.Hash
			}
		}
		back = fmt.Sprintf("split shard %d again at the boundary the merge removed: shardctl split --shard %d%s --to %s --schema %s", p.Target.ShardID, p.Target.ShardID, at, p.Source.Addr(), p.Source.Schema)
	default:
		back = fmt.Sprintf("merge the new shard back into the one it was split from: shardctl merge --shard %d --into %d", p.Target.ShardID, p.Source.ShardID)
	}
	if p.State != plans.StateDone {
		return fmt.Sprintf("let it finish first ('shardctl plan resume %s' runs its cleanup), then %s", p.ID, back)
	}
	return back
}

// movedKeys is the key filter of the rows the plan moved (its sharded
// tables share it).
func movedKeys(p *plans.Plan) keyspace.Filter {
	for _, t := range p.Copy {
		if t.Sharded {
			return t.Filter
		}
	}
	return keyspace.Filter{}
}

// Abort undoes a plan that has not cut over: lifts the fence, puts the
// mappings back online as they were, and removes what was copied to the
// target. After cutover it refuses: the shard map already points at the
// target, and moving back is a new operation.
func Abort(ctx context.Context, env Env, p *plans.Plan) error {
	if p.InWindow() {
		return fmt.Errorf("%w: plan %s has cut over and is inside its reverse window: switch back with 'shardctl plan revert %s', or finish with 'shardctl plan complete %s' (it drops the copy that does not serve)",
			ErrCutOver, p.ID, p.ID, p.ID)
	}
	if p.CutOver() {
		return fmt.Errorf("%w: plan %s has cut over, the shard map points at %s/%s; to undo it, %s",
			ErrCutOver, p.ID, p.Target.Addr(), p.Target.Schema, undoAdvice(p))
	}
	if p.State == plans.StateAborted {
		return nil
	}
	if env.Log == nil {
		env.Log = discard
	}
	l, err := lockPlan(ctx, env, p, "abort")
	if err != nil {
		return err
	}
	defer l.Release()
	r := &runner{env: env, p: p}
	defer r.close()
	if err := r.open(ctx); err != nil {
		return err
	}
	if err := resolveRegistered(ctx, env.Store, p); err != nil {
		return fmt.Errorf("abort: the new shard's location: %w", err)
	}
	m, err := env.Store.Load(ctx)
	if err != nil {
		return fmt.Errorf("abort: read the shard map: %w", err)
	}
	if interlock.SwitchCommitted(m, p) {
		// Lifting the fence now would let a router's cached map write to the
		// source the map no longer serves, and the copy removed would be the served one.
		return fmt.Errorf("%w: plan %s's switch committed (its acknowledgement was lost), the shard map points at %s/%s: finish it with 'shardctl plan resume %s'; to undo it afterwards, %s",
			ErrCutOver, p.ID, p.Target.Addr(), p.Target.Schema, p.ID, undoAdvice(p))
	}
	if stale, err := abortIfStale(ctx, r); stale || err != nil {
		return err
	}
	lockWait := p.Options.LockWaitMS.D()
	if err := fence.Remove(ctx, r.src, p.Source.Schema, fenceNames(p), lockWait); err != nil && dbutil.ErrNumber(err) != 1049 {
		return fmt.Errorf("abort: lift fence: %w", err)
	}
	// One change at a time: a mapping that was never taken offline (the
	// plan stopped before its fence made a split's upper range) has nothing
	// to put back online. Each change is idempotent, so a re-run is safe.
	for _, c := range p.Abort {
		err := env.Store.Apply(ctx, "abort "+p.ID, []shardmap.Change{c})
		if err == nil || c.Op == shardmap.OpSetStatus && errors.Is(err, shardmap.ErrNotFound) {
			continue
		}
		return fmt.Errorf("abort: restore shard map: %w", err)
	}
	made := p.Step(plans.StepCreate).Attempts > 0
	if made {
		// A create step that failed before its CREATE DATABASE (a name the
		// server refused) made no target copy: nothing to remove there.
		if made, err = dbutil.SchemaExists(ctx, r.dst, p.Target.Schema); err != nil {
			return fmt.Errorf("abort: target %s: %w", p.Target.Addr(), err)
		}
	}
	if made {
		if err := r.undoTargetCopy(ctx, "abort", nil); err != nil {
			return err
		}
		if !p.DropTargetSchema {
			if err := restoreTargetTriggers(ctx, r.dst, p); err != nil {
				return fmt.Errorf("abort: %w", err)
			}
			if err := schemaobj.Drop(ctx, r.dst, p.Target.Schema, carried(p)); err != nil {
				return fmt.Errorf("abort: %w", err)
			}
		}
	}
	p.State = plans.StateAborted
	return r.save(true)
}
