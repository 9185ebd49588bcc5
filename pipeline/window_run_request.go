package pipeline

// The reverse window's requests: 'plan revert' and 'plan complete' from
// another process leave a request file beside the plan, which the process
// running the window takes, carries out and answers in the plan.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
)

// requestFile is a 'plan revert' or 'plan complete' waiting for the process running the window.
type requestFile struct {
	ID     string `json:"id"`
	Action string `json:"action"`
}

// RequestPath is where requests to the process running plan file path wait.
func RequestPath(planPath string) string { return planPath + ".request" }

// takeRequest claims a pending request (renaming it first, so a requester
// that gives up can tell whether it was taken).
func takeRequest(planPath string) (*requestFile, error) {
	if planPath == "" {
		return nil, nil
	}
	taken := RequestPath(planPath) + ".taken"
	if err := os.Rename(RequestPath(planPath), taken); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer os.Remove(taken)
	b, err := os.ReadFile(taken)
	if err != nil {
		return nil, err
	}
	var q requestFile
	if err := json.Unmarshal(b, &q); err != nil {
		return nil, fmt.Errorf("request file %s: %w", taken, err)
	}
	return &q, nil
}

func (r *runner) recordRequest(q *requestFile, err error) {
	rec := plans.Request{ID: q.ID, Action: q.Action, At: time.Now().UTC()}
	if err != nil {
		rec.Error = err.Error()
	}
	r.mu.Lock()
	w := r.p.Window
	w.Requests = append(w.Requests, rec)
	if n := len(w.Requests); n > 10 {
		w.Requests = w.Requests[n-10:]
	}
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
			why = "it has not cut over yet (to undo it before cutover: 'shardctl plan abort')"
		default:
			why = fmt.Sprintf("its window has ended (%s; state %s)", p.Window.EndReason, p.State)
		}
		return p, fmt.Errorf("%w: plan %s cannot %s: %s", ErrRefused, p.ID, action, why)
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	q := requestFile{ID: hex.EncodeToString(nonce[:]), Action: action}
	b, _ := json.Marshal(q)
	tmp := fmt.Sprintf("%s.%s.tmp", RequestPath(path), q.ID)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return p, fmt.Errorf("write request: %w", err)
	}
	err = os.Link(tmp, RequestPath(path))
	os.Remove(tmp)
	if errors.Is(err, os.ErrExist) {
		// Busy, not resumable: the other request is being carried out (exit 4).
		return p, fmt.Errorf("%w: another request is waiting for plan %s (%s); wait for it, or remove that file if no process runs the plan", lock.ErrBusy, p.ID, RequestPath(path))
	} else if err != nil {
		return p, fmt.Errorf("write request: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		cur, err := plans.Load(path)
		if err != nil {
			return p, err
		}
		p = cur
		if rec := findRequest(p, q.ID); rec != nil {
			if rec.Error != "" {
				return p, fmt.Errorf("%w: %s", ErrNotNow, rec.Error)
			}
			if action == ActionComplete {
				return p, waitEnded(ctx, env, path, p, deadline)
			}
			return p, nil
		}
		free, err := lockFree(ctx, env, p)
		if err != nil {
			return p, err
		}
		if free {
			if _, err := os.Stat(RequestPath(path)); err != nil {
				return p, fmt.Errorf("%w: the process running plan %s took the request and stopped before finishing it; 'shardctl plan resume %s' finishes any switch it began", ErrNotNow, p.ID, p.ID)
			}
			done, p2, err := runRequest(ctx, env, path)
			if done {
				return p2, err
			}
		}
		if time.Now().After(deadline) {
			if os.Remove(RequestPath(path)) == nil {
				return p, fmt.Errorf("%w: the process running plan %s did not take the request within %s; nothing was changed", ErrNotNow, p.ID, wait)
			}
			return p, fmt.Errorf("%w: the process running plan %s took the request but did not finish it within %s; see 'shardctl plan show %s'", ErrNotNow, p.ID, wait, p.ID)
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func findRequest(p *plans.Plan, id string) *plans.Request {
	if p.Window == nil {
		return nil
	}
	for i := range p.Window.Requests {
		if p.Window.Requests[i].ID == id {
			return &p.Window.Requests[i]
		}
	}
	return nil
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
			return fmt.Errorf("%w: the process running plan %s stopped before its cleanup finished; 'shardctl plan resume %s' finishes it", ErrNotNow, p.ID, p.ID)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the window of plan %s ended; its cleanup is still running (see 'shardctl plan show %s')", ErrNotNow, p.ID, p.ID)
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
		return fmt.Errorf("%w: the cleanup of plan %s stopped; see 'shardctl plan show %s' and resume it", ErrNotNow, p.ID, p.ID)
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
	lk, err := lock.Acquire(ctx, env.Store.DB, env.Store.Schema, p.Locks, lock.Holder(p.ID+" (window request)"))
	if errors.Is(err, lock.ErrBusy) {
		return false, p, nil
	} else if err != nil {
		return true, p, err
	}
	q, err := takeRequest(path)
	if err != nil || q == nil {
		lk.Release()
		return err != nil, p, err
	}
	r := &runner{env: env, p: p}
	if q.Action == ActionComplete {
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
