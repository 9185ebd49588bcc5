package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardctl/shardctl/internal/fault"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
)

// lockPlan takes plan p's locks for a run, an abort, a window request or a
// re-point (role names it in the holder row; "" for a run), then makes sure
// p is still the plan's latest copy. GET_LOCK waits a few seconds
// (lock.Wait), so a second process that read the plan while another worked
// on it can get the locks once that one is done: working from its stale copy
// would run the cutover or the cleanup again and overwrite the recorded
// result. Such a process, like one refused by a live holder, stops with
// lock.ErrBusy (exit 4) having changed nothing.
func lockPlan(ctx context.Context, env Env, p *plans.Plan, role string) (*lock.Lock, error) {
	fault.Hit("lock:plan") // tests: hold a process that has read its plan, before it locks it
	holder := p.ID
	if role != "" {
		holder += " (" + role + ")"
	}
	l, err := lock.Acquire(ctx, env.Store.DB, env.Store.Schema, p.Locks, lock.Holder(holder))
	if be := (*lock.BusyError)(nil); errors.As(err, &be) && be.HeldFor(p.ID) {
		return nil, fmt.Errorf("%w: another process is working on plan %s now (%s holds %s): nothing needs doing here; follow it with 'shardctl plan watch %s'",
			lock.ErrBusy, p.ID, be.Holder, be.Name, p.ID)
	}
	if err != nil {
		return nil, err
	}
	if err := stillLatest(ctx, env, p); err != nil {
		l.Release()
		return nil, err
	}
	p.RunBy = lock.Process()
	return l, nil
}

// stillLatest refuses p when its file or its plans-table row, read under
// the plan's locks, is a later revision than the one this process loaded.
func stillLatest(ctx context.Context, env Env, p *plans.Plan) error {
	var cur *plans.Plan
	if env.PlanPath != "" {
		cur, _ = plans.Load(env.PlanPath) // a file gone or unreadable is no later copy
	}
	if env.Store != nil {
		if row, err := planstore.New(env.Store.DB, env.Store.Schema).Get(ctx, p.ID); err == nil {
			cur = planstore.Later(cur, row)
		}
	}
	if cur == nil || cur.Revision <= p.Revision {
		return nil
	}
	by := cur.RunBy
	if by == "" {
		by = "a process that did not say which"
	}
	if cur.State == plans.StateDone || cur.State == plans.StateAborted {
		return fmt.Errorf("%w: plan %s is %s already: another process (%s) finished it while this one waited for its lock; nothing needs doing, and nothing was changed here (see 'shardctl plan show %s')",
			lock.ErrBusy, p.ID, cur.State, by, p.ID)
	}
	return fmt.Errorf("%w: plan %s changed while this process waited for its lock: another process (%s) worked on it (revision %d, read here at %d; now %s, next step %s); nothing was changed here: see 'shardctl plan show %s', and resume it again if it stopped",
		lock.ErrBusy, p.ID, by, cur.Revision, p.Revision, cur.State, cur.NextStep(), p.ID)
}
