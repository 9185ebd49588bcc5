package pipeline

import (
	"context"
	"fmt"

	"github.com/shardctl/shardctl/pipeline/checks"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/throttle"
)

// runChecks is RunChecks for a run (apply or resume), with the map read now.
func (r *runner) runChecks(ctx context.Context) error {
	m, err := r.env.Store.Load(ctx)
	if err != nil {
		return err
	}
	if err := checks.RunChecks(ctx, &checks.CheckEnv{Src: r.src, Dst: r.dst, Plan: r.p, Map: m, Store: r.env.Store}); err != nil {
		return fmt.Errorf("%s %s: %w", r.p.Operation, r.shardName(), err)
	}
	return nil
}

// planChecks runs the checks while a plan is made and records the shard map
// it was made against.
func (r *runner) planChecks(ctx context.Context) error {
	m, err := r.env.Store.Load(ctx)
	if err != nil {
		return err
	}
	if err := checks.RunChecks(ctx, &checks.CheckEnv{Src: r.src, Dst: r.dst, Plan: r.p, Map: m, Store: r.env.Store, Planning: true}); err != nil {
		return err
	}
	// The replicas a run watches must answer now, not only when the run starts.
	cfg := throttleConfig(r.p.Options)
	cfg.Target = r.dst
	watched, err := throttle.Probe(ctx, r.src, cfg, r.env.Creds)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	r.p.Watched = nil
	for _, w := range watched {
		r.p.Watched = append(r.p.Watched, plans.WatchedReplica{Addr: w.Addr, Side: w.Side})
	}
	interlock.RecordAgainst(m, r.p)
	return nil
}
