package pipeline

// Carrying out the reverse window's requests (the request files are
// pipeline/window's): the process running the window answers them, and
// with no process running the plan, the requester runs them itself.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
)

// recordRequest answers q in the plan and saves it.
func (r *runner) recordRequest(q *window.Request, err error) {
	r.mu.Lock()
	window.Record(r.p.Window, q, err)
	r.mu.Unlock()
	_ = r.save(true)
}

// RequestWindow asks for a revert or a complete of plan file path. The
// process running the window carries it out and the call waits (at most
// wait); with no process running the plan, the call does it itself (a
// revert leaves the plan stopped inside its window: 'plan resume' keeps the
// tail going; a complete runs the cleanup to the end).
func RequestWindow(ctx context.Context, env Env, path, action string, wait time.Duration) (*plans.Plan, error) {
	if env.Log == nil {
		env.Log = discard
	}
	if env.Observer == nil {
		env.Observer = NopObserver{}
	}
	env.PlanPath = path
	p, err := plans.Load(path)
	if err != nil {
		return nil, err
	}
	if !p.InWindow() {
		why := "it has no reverse window (made without --reverse-window)"
		switch {
		case p.Window == nil:
		case !p.CutOver():
			why = fmt.Sprintf("it has not cut over yet (to undo it before cutover: 'shardctl plan abort %s')", p.ID)
		default:
			why = fmt.Sprintf("its window has ended (%s; state %s)", p.Window.EndReason, p.State)
		}
		return p, fmt.Errorf("%w: plan %s cannot %s: %s", ErrRefused, p.ID, action, why)
	}
	q, err := window.Post(path, p.ID, action)
	if err != nil {
		return p, err
	}
	deadline := time.Now().Add(wait)
	for {
		cur, err := plans.Load(path)
		if err != nil {
			return p, err
		}
		p = cur
		if rec := window.Find(p, q.ID); rec != nil {
			if rec.Error != "" {
				return p, fmt.Errorf("%w: %s", window.ErrNotNow, rec.Error)
			}
			if action == window.ActionComplete {
				return p, waitEnded(ctx, env, path, p, deadline)
			}
			return p, nil
		}
		free, err := lockFree(ctx, env, p)
		if err != nil {
			return p, err
		}
		if free {
			if _, err := os.Stat(window.RequestPath(path)); err != nil {
				return p, fmt.Errorf("%w: the process running plan %s took the request and stopped before finishing it; 'shardctl plan resume %s' finishes any switch it began", window.ErrNotNow, p.ID, p.ID)
			}
			done, p2, err := runRequest(ctx, env, path)
			if done {
				return p2, err
			}
		}
		if time.Now().After(deadline) {
			if os.Remove(window.RequestPath(path)) == nil {
				return p, fmt.Errorf("%w: the process running plan %s did not take the request within %s; nothing was changed", window.ErrNotNow, p.ID, wait)
			}
			return p, fmt.Errorf("%w: the process running plan %s took the request but did not finish it within %s; see 'shardctl plan show %s'", window.ErrNotNow, p.ID, wait, p.ID)
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitEnded waits until a completing plan's process has finished the cleanup.
func waitEnded(ctx context.Context, env Env, path string, p *plans.Plan, deadline time.Time) error {
	for p.State == plans.StateRunning {
		if free, err := lockFree(ctx, env, p); err != nil {
			return err
		} else if free {
			if cur, err := plans.Load(path); err == nil && cur.State != plans.StateRunning {
				*p = *cur
				break
			}
			return fmt.Errorf("%w: the process running plan %s stopped before its cleanup finished; 'shardctl plan resume %s' finishes it", window.ErrNotNow, p.ID, p.ID)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the window of plan %s ended; its cleanup is still running (see 'shardctl plan show %s')", window.ErrNotNow, p.ID, p.ID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		cur, err := plans.Load(path)
		if err != nil {
			return err
		}
		*p = *cur
	}
	if p.State == plans.StateStopped {
		return fmt.Errorf("%w: the cleanup of plan %s stopped; see 'shardctl plan show %s' and resume it", window.ErrNotNow, p.ID, p.ID)
	}
	return nil
}

// lockFree reports that no process holds the plan's locks.
func lockFree(ctx context.Context, env Env, p *plans.Plan) (bool, error) {
	for _, n := range p.Locks {
		var id sql.NullInt64
		if err := env.Store.DB.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", n).Scan(&id); err != nil {
			return false, fmt.Errorf("check lock %s: %w", n, err)
		}
		if id.Valid {
			return false, nil
		}
	}
	return true, nil
}

// runRequest carries out the pending request itself when no process runs
// the plan. done is false when another process took the lock meanwhile.
func runRequest(ctx context.Context, env Env, path string) (done bool, _ *plans.Plan, _ error) {
	p, err := plans.Load(path)
	if err != nil {
		return true, nil, err
	}
	lk, err := lockPlan(ctx, env, p, "window request")
	if errors.Is(err, lock.ErrBusy) {
		return false, p, nil
	} else if err != nil {
		return true, p, err
	}
	q, err := window.Take(path)
	if err != nil || q == nil {
		lk.Release()
		return err != nil, p, err
	}
	r := &runner{env: env, p: p}
	if q.Action == window.ActionComplete {
		r.recordRequest(q, nil)
		p.Window.Completing = true
		_ = r.save(true)
		lk.Release()
		return true, p, Run(ctx, env, p)
	}
	defer lk.Release()
	defer r.close()
	if err := r.open(ctx); err != nil {
		return true, p, err
	}
	wr := &windowRun{r: r}
	defer func() { _ = wr.stopTail() }()
	err = wr.restore(ctx)
	if err == nil {
		err = wr.revert(ctx)
	}
	r.recordRequest(q, err)
	if err := wr.stopTail(); err != nil {
		env.Log.Warn("reverse window: stopping the tail", "err", err)
	}
	r.mu.Lock()
	p.State = plans.StateStopped // inside its window: 'plan resume' keeps the tail going
	r.mu.Unlock()
	_ = r.save(true)
	return true, p, err
}
