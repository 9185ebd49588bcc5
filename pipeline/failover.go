package pipeline

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/shardmap"
)

// Repoint moves a stopped plan's source to addr, a replica promoted after
// the source failed, and the source shard's location in the shard map with
// it. The tail then resumes there by GTID (see sourceMoved). A plan that has
// cut over is refused: its source is no longer read.
//
// The shard map routes applications, so it changes only after every check
// passed: addr runs the flavor of the plan's servers, has the schema, and
// holds the plan's whole checkpoint GTID set (binlog.GTIDContains, per
// flavor). The location and the plans table's copy of the plan change in
// one transaction; the plan file follows (the higher revision wins).
func Repoint(ctx context.Context, env Env, p *plans.Plan, addr dbutil.Addr) error {
	if p.CutOver() {
		return fmt.Errorf("%w: plan %s has cut over; its source is no longer read, there is nothing to re-point", ErrRefused, p.ID)
	}
	if p.Source.Host == addr.Host && p.Source.Port == addr.Port {
		return nil
	}
	if p.Done(plans.StepFence) {
		return fmt.Errorf("%w: plan %s fenced its source before the failover (the fence and the final position belong to the failed server): abort it ('shardctl plan abort %s') and start again", ErrRefused, p.ID, p.ID)
	}
	if p.Target.Host == addr.Host && p.Target.Port == addr.Port {
		return fmt.Errorf("%w: --source %s is the plan's target; give the promoted replica of %s", ErrRefused, addr, p.Source.Addr())
	}
	db, err := dbutil.Open(ctx, addr, env.Creds, "")
	if err != nil {
		return fmt.Errorf("%w: new source: %w", ErrRefused, err)
	}
	defer db.Close()
	if err := checkCandidate(ctx, env, p, db, addr); err != nil {
		return err
	}
	l, err := lockPlan(ctx, env, p, "re-point source")
	if err != nil {
		return err
	}
	defer l.Release()
	old, was := p.Source.Addr(), p.Source
	p.Source.Host, p.Source.Port = addr.Host, addr.Port
	// The checkpoint may lag what the target applied (it is saved at most
	// twice a second): checksums after the catch-up on the new source find
	// rows the promoted replica never received, so they run again.
	v := p.Step(plans.StepVerify)
	verified := v != nil && v.State == plans.Done
	if verified {
		v.State = plans.Pending
	}
	p.Revision++
	ps := planstore.New(env.Store.DB, env.Store.Schema)
	change := shardmap.Change{Op: shardmap.OpMoveLocation, ShardID: p.Source.ShardID, Host: addr.Host, Port: addr.Port}
	err = env.Store.ApplyWith(ctx, fmt.Sprintf("plan %s: source %s failed over to %s", p.ID, old, addr), []shardmap.Change{change},
		func(tx *sql.Tx) error { return ps.PutIn(ctx, tx, p) })
	if err != nil {
		p.Source, p.Revision = was, p.Revision-1
		if verified {
			v.State = plans.Done
		}
		return fmt.Errorf("re-point shard %d to %s: %w", p.Source.ShardID, addr, err)
	}
	if env.Log != nil {
		env.Log.Info("plan source re-pointed", "plan", p.ID, "from", old, "to", addr.String())
	}
	return plans.Save(env.PlanPath, p)
}

// checkCandidate refuses a new source that runs another flavor than the
// plan's source, lacks the schema, or does not hold the plan's checkpoint
// (a copy that is no replica of the source, or one that fell behind).
func checkCandidate(ctx context.Context, env Env, p *plans.Plan, db *sql.DB, addr dbutil.Addr) error {
	fc, err := dbutil.FlavorOf(ctx, db)
	if err != nil {
		return fmt.Errorf("%w: new source %s: %w", ErrRefused, addr, err)
	}
	from := p.Checkpoints.Applied
	if from.IsZero() {
		from = p.Checkpoints.Start
	}
	// The target may run the other flavor: the checkpoint's GTIDs say
	// which kind of server the source was.
	if g := binlog.GTIDFlavor(from.GTID); from.GTID != "" && g != fc.Name() {
		return fmt.Errorf("%w: --source %s runs %s but the plan's source %s wrote %s GTIDs: a promoted replica of %s runs the same kind of server", ErrRefused, addr, fc, p.Source.Addr(), g, p.Source.Addr())
	}
	if ok, err := dbutil.SchemaExists(ctx, db, p.Source.Schema); err != nil {
		return fmt.Errorf("new source %s: %w", addr, err)
	} else if !ok {
		return fmt.Errorf("%w: the new source %s has no schema %s: give the promoted replica of %s", ErrRefused, addr, p.Source.Schema, p.Source.Addr())
	}
	if from.IsZero() {
		return nil // the tail has not started: the copy begins on the new source
	}
	if from.GTID == "" {
		return fmt.Errorf("%w: %w", ErrRefused, binlog.ErrNoGTID)
	}
	return awaitGTID(ctx, db, addr.String(), from.GTID, p.ID)
}
