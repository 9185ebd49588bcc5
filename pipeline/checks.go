package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// Per-operation checks (block/spirit's check registry): one file per check,
// check_*.go, each registering itself with the operations it applies to and
// the step until which it holds. They run when a plan is made (so a dry run
// refuses what a run would), and again under the plan's locks at every
// 'plan apply' and 'plan resume', since a plan may run hours after it was made.

// Check is one check.
type Check struct {
	Name string
	// Ops are the operations it applies to (move, split, merge); none: all.
	Ops []string
	// Until is the step that ends it: the check runs only while that step has
	// not started (a merge's collision scan would find its own copied rows
	// once the copy began). "": always.
	Until string
	Run   func(ctx context.Context, c *CheckEnv) error
}

// CheckEnv is what a check reads.
type CheckEnv struct {
	Src, Dst *sql.DB
	Plan     *plans.Plan
	Map      *shardmap.Map // read under the plan's locks at apply/resume
	Store    *shardmap.Store
	Planning bool // the plan is being made (a dry run or --plan-out included)
}

var registry []Check

func register(c Check) { registry = append(registry, c) }

func (c Check) applies(p *plans.Plan) bool {
	if len(c.Ops) > 0 && !slices.Contains(c.Ops, p.Operation) {
		return false
	}
	if c.Until != "" {
		if s := p.Step(c.Until); s != nil && (s.Attempts > 0 || p.Done(c.Until)) {
			return false
		}
	}
	return true
}

// RunChecks runs every registered check that applies to the plan now; the
// first refusal is returned (nothing was changed).
func RunChecks(ctx context.Context, c *CheckEnv) error {
	for _, ch := range registry {
		if !ch.applies(c.Plan) {
			continue
		}
		if err := ch.Run(ctx, c); err != nil {
			return fmt.Errorf("check %s: %w", ch.Name, err)
		}
	}
	return nil
}

// runChecks is RunChecks for a run (apply or resume), with the map read now.
func (r *runner) runChecks(ctx context.Context) error {
	m, err := r.env.Store.Load(ctx)
	if err != nil {
		return err
	}
	if err := RunChecks(ctx, &CheckEnv{Src: r.src, Dst: r.dst, Plan: r.p, Map: m, Store: r.env.Store}); err != nil {
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
	if err := RunChecks(ctx, &CheckEnv{Src: r.src, Dst: r.dst, Plan: r.p, Map: m, Store: r.env.Store, Planning: true}); err != nil {
		return err
	}
	// The replicas a run watches must answer now, not only when the run starts.
	thr, err := NewThrottler(ctx, r.src, r.p.Options, r.env.Creds)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	thr.Close()
	recordAgainst(m, r.p)
	return nil
}
