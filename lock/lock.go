// Package lock keeps two operators, or two cron runs, off the same shard:
// GET_LOCK on a pinned connection to the sharding database, plus a row naming
// the holder so a refused operator is told who has it. A killed process loses
// its connection and with it the lock, so a crash never leaves a stale lock.
package lock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/dbutil"
)

// ErrBusy is returned when another operation holds one of the locks.
var ErrBusy = errors.New("locked by another operation")

// BusyError is ErrBusy naming the lock and its holder (Holder's text).
type BusyError struct{ Name, Holder string }

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v: %s is held by %s; wait for it to finish, or if it died, resume or abort its plan", ErrBusy, e.Name, e.Holder)
}

// Is makes a BusyError an ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// HeldFor reports whether the holder is a process working on plan id.
func (e *BusyError) HeldFor(id string) bool { return strings.HasPrefix(e.Holder, id+" (") }

// Lock is a set of held named locks.
type Lock struct {
	conn   *sql.Conn
	schema string
	names  []string
	lost   chan struct{}
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// Name is the lock name for a shard. MariaDB lock names are at most 64 characters.
func Name(schema string, shardID int) string {
	n := fmt.Sprintf("shardctl/%s/shard/%d", schema, shardID)
	if len(n) > 64 {
		n = n[len(n)-64:]
	}
	return n
}

// Holder describes this process for the holder row.
func Holder(planID string) string {
	return fmt.Sprintf("%s (%s)", planID, Process())
}

// Process names this process: "pid N on HOST".
func Process() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("pid %d on %s", os.Getpid(), host)
}

// Wait is how long Acquire waits for a held lock. A process killed a moment
// ago still holds its lock until the server notices the closed connection;
// a live holder is still refused, a few seconds later.
const Wait = 3 * time.Second

// Acquire takes every lock in names (in a fixed order, so two operations
// wanting overlapping sets cannot deadlock), waiting at most Wait for each.
func Acquire(ctx context.Context, db *sql.DB, schema string, names []string, holder string) (*Lock, error) {
	names = append([]string(nil), names...)
	sort.Strings(names)
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	l := &Lock{conn: conn, schema: schema, names: names, lost: make(chan struct{}), stop: make(chan struct{})}
	for i, n := range names {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", n, int(Wait.Seconds())).Scan(&got); err != nil {
			l.release(context.Background(), names[:i])
			return nil, fmt.Errorf("lock %s: %w", n, err)
		}
		if got.Int64 != 1 {
			who := l.holderOf(ctx, db, n)
			l.release(context.Background(), names[:i])
			return nil, &BusyError{Name: n, Holder: who}
		}
		if _, err := conn.ExecContext(ctx, "REPLACE INTO "+dbutil.Table(schema, "locks")+" (name, holder, connection_id, acquired_at) VALUES (?, ?, CONNECTION_ID(), NOW(3))", n, holder); err != nil {
			l.release(context.Background(), names[:i+1])
			return nil, fmt.Errorf("lock %s: record holder: %w", n, err)
		}
	}
	l.wg.Add(1)
	go l.keepalive()
	return l, nil
}

// InUse reports whether any of names is held by some session now (a run of
// the plan that takes them is alive).
func InUse(ctx context.Context, db *sql.DB, names []string) (bool, error) {
	for _, n := range names {
		var id sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", n).Scan(&id); err != nil {
			return false, fmt.Errorf("lock %s: %w", n, err)
		}
		if id.Valid {
			return true, nil
		}
	}
	return false, nil
}

func (l *Lock) holderOf(ctx context.Context, db *sql.DB, name string) string {
	var who string
	err := db.QueryRowContext(ctx, "SELECT holder FROM "+dbutil.Table(l.schema, "locks")+" WHERE name = ? AND connection_id = IS_USED_LOCK(?)", name, name).Scan(&who)
	if err != nil || who == "" {
		return "another session (holder unknown)"
	}
	return who
}

// keepalive checks every few seconds that the connection still holds the
// locks; if not, Lost is closed and the operation must stop.
func (l *Lock) keepalive() {
	defer l.wg.Done()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ok := true
			for _, n := range l.names {
				var mine sql.NullInt64
				if err := l.conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", n).Scan(&mine); err != nil || mine.Int64 != 1 {
					ok = false
					break
				}
			}
			cancel()
			if !ok {
				l.once.Do(func() { close(l.lost) })
				return
			}
		}
	}
}

// Bind returns a context that ends with cause lost when the locks are lost,
// so work done under them stops; cancel releases it.
func (l *Lock) Bind(ctx context.Context, lost error) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-l.lost:
			cancel(lost)
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Release gives the locks back.
func (l *Lock) Release() {
	close(l.stop)
	l.wg.Wait()
	l.release(context.Background(), l.names)
}

func (l *Lock) release(ctx context.Context, names []string) {
	for _, n := range names {
		_, _ = l.conn.ExecContext(ctx, "DELETE FROM "+dbutil.Table(l.schema, "locks")+" WHERE name = ? AND connection_id = CONNECTION_ID()", n)
		_, _ = l.conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", n)
	}
	l.conn.Close()
}
