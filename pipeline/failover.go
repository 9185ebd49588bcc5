package pipeline

import (
	"context"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// Repoint moves a stopped plan's source to addr, a replica promoted after
// the source failed, and the source shard's location in the shard map with
// it. The tail then resumes there by GTID (see sourceMoved). A plan that has
// cut over is refused: its source is no longer read.
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
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", p.Source.Schema).Scan(&n); err != nil {
		return fmt.Errorf("new source %s: %w", addr, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: the new source %s has no schema %s: give the promoted replica of %s", ErrRefused, addr, p.Source.Schema, p.Source.Addr())
	}
	l, err := lock.Acquire(ctx, env.Store.DB, env.Store.Schema, p.Locks, lock.Holder(p.ID+" (re-point source)"))
	if err != nil {
		return err
	}
	defer l.Release()
	old := p.Source.Addr()
	change := shardmap.Change{Op: shardmap.OpMoveLocation, ShardID: p.Source.ShardID, Host: addr.Host, Port: addr.Port}
	if err := env.Store.Apply(ctx, fmt.Sprintf("plan %s: source %s failed over to %s", p.ID, old, addr), []shardmap.Change{change}); err != nil {
		return fmt.Errorf("re-point shard %d to %s: %w", p.Source.ShardID, addr, err)
	}
	p.Source.Host, p.Source.Port = addr.Host, addr.Port
	// The checkpoint may lag what the target applied (it is saved at most
	// twice a second): checksums after the catch-up on the new source find
	// rows the promoted replica never received, so they run again.
	if v := p.Step(plans.StepVerify); v != nil && v.State == plans.Done {
		v.State = plans.Pending
	}
	if env.Log != nil {
		env.Log.Info("plan source re-pointed", "plan", p.ID, "from", old, "to", addr.String())
	}
	return plans.Save(env.PlanPath, p)
}
