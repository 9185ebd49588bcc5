package pipeline

// The blackout's work on the servers, the shard map and the plan file.

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/plans"
)

// liveWork is blackoutWork on the servers: direction b of runner r.
type liveWork struct {
	r        *runner
	b        *blackout
	sessions *fence.Sessions // armed by arm, closed by disarm
}

func (l *liveWork) pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (l *liveWork) killBlockers(ctx context.Context) {
	if kill := l.r.killBefore(l.b.db, l.b.schema, fence.Names(l.b.fence)); kill != nil {
		kill(ctx)
	}
}

func (l *liveWork) wait(ctx context.Context) error { return l.b.wait(ctx) }

func (l *liveWork) longTransaction(ctx context.Context, budget time.Duration) (string, error) {
	return longTransaction(ctx, l.b.db, budget, l.b.side)
}

func (l *liveWork) counters(ctx context.Context) error { return l.b.counters(ctx) }

func (l *liveWork) blockers(ctx context.Context) []plans.Blocker {
	return l.r.reportBlockers(ctx, l.b.db, l.b.schema, fence.Names(l.b.fence))
}

func (l *liveWork) arm(ctx context.Context, budget time.Duration) (string, error) {
	s, why, err := armFence(ctx, l.b.db, l.b.schema, l.b.arm, budget)
	l.sessions = s
	return why, err
}

func (l *liveWork) disarm() {
	if l.sessions != nil {
		l.sessions.Close()
		l.sessions = nil
	}
}

func (l *liveWork) caughtUp(ctx context.Context) (time.Duration, error) { return l.b.caughtUp(ctx) }
func (l *liveWork) offline(ctx context.Context) error                   { return l.b.offline(ctx) }

func (l *liveWork) fence(ctx context.Context, left time.Duration) error {
	return l.sessions.Fence(ctx, l.b.schema, left)
}

func (l *liveWork) finalPosition(ctx context.Context) (binlog.Position, error) {
	return binlog.MasterStatus(ctx, l.b.db)
}

func (l *liveWork) mark(final binlog.Position, held bool) { l.b.mark(final, held) }
func (l *liveWork) held() bool                            { return l.b.held() }
func (l *liveWork) save() error                           { return l.r.save(true) }

func (l *liveWork) finalCatchup(ctx context.Context, final binlog.Position, d time.Duration) error {
	t := l.b.tail()
	at, t0 := t.Stats(), time.Now()
	if err := finalCatchup(ctx, t, final, d); err != nil {
		return err
	}
	// What the final catch-up had to do, for the benchmark's analysis.
	st := t.Stats()
	l.r.env.Log.Info(l.b.label+"final catch-up", "from", at.Applied, "to", final, "rows", st.RowsApplied-at.RowsApplied, "events", st.Events-at.Events, "took", time.Since(t0))
	return nil
}

func (l *liveWork) recheck(ctx context.Context, d time.Duration) (bool, error) {
	if l.b.recheck == nil {
		return false, nil
	}
	return l.b.recheck(ctx, d)
}

// done without b.done: the tail keeps running into the cutover, the next
// step; stopping it is not part of the blackout.
func (l *liveWork) done(ctx context.Context, start time.Time, idx int) error {
	if l.b.done == nil {
		return nil
	}
	return l.b.done(ctx, start, idx)
}

func (l *liveWork) removeFence(ctx context.Context) error {
	return fence.Remove(ctx, l.b.db, l.b.schema, fence.Names(l.b.fence), l.r.p.Options.LockWaitMS.D())
}

func (l *liveWork) online(ctx context.Context) error { return l.b.online(ctx) }

// armFence opens a fence session per table of ts on db and arms their
// fence in schema (fence/armed.go), ahead of an attempt's readiness check.
// why is set when arming gave up within the budget (a transaction held a
// table): the attempt backs off, with nothing fenced or offline.
func armFence(ctx context.Context, db *sql.DB, schema string, ts []fence.Table, budget time.Duration) (s *fence.Sessions, why string, err error) {
	s, err = fence.OpenSessions(ctx, db, len(ts), budget)
	if err != nil {
		return nil, "", fmt.Errorf("open fence sessions on %s: %w", schema, err)
	}
	if err := s.Arm(ctx, schema, ts, budget); err != nil {
		s.Close()
		if isFenceTimeout(err) {
			return nil, fmt.Sprintf("arming the fence: a transaction held a table beyond the %s budget (%v)", budget, err), nil
		}
		return nil, "", err
	}
	return s, "", nil
}
