// Package router is the piece of shardctl an application links in: it
// resolves a sharding key to its shard's server and schema, caches the shard
// map, validates the cache against the map's version counter, and handles the
// book's "the shard moved" errors (1290 read-only/fenced, 1146 table gone,
// 2006 server gone) by looking the key up again.
//
//	r := router.New(store, router.Options{Creds: creds})
//	err := r.Do(ctx, "employees", "10042", func(ctx context.Context, t router.Target) error {
//	    _, err := t.DB.ExecContext(ctx, "UPDATE "+t.Table("employees")+" SET last_name = ? WHERE emp_no = ?", name, 10042)
//	    return err
//	})
package router

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/shardmap"
)

// ErrOffline is returned by Resolve while the key's mapping is offline (a
// move, split or merge is cutting over): retry later.
var ErrOffline = errors.New("shard mapping offline: retry shortly")

// DefaultTTL is how long a router trusts its cached map by default;
// plans.DefaultRouteGrace is twice this.
const DefaultTTL = 500 * time.Millisecond

// Options tune a Router.
type Options struct {
	Creds    dbutil.Creds  // account for the shard servers
	TTL      time.Duration // how long a cached map is trusted before its version is checked (default 500ms)
	RetryFor time.Duration // how long Do keeps retrying offline and moved errors (default 30s)
	MaxConns int           // per shard server pool (default 16)
}

// Target is where a key lives.
type Target struct {
	shardmap.Location
	Offline bool
	DB      *sql.DB // pool to the shard's server
}

// Table returns the schema-qualified, quoted name of table in the shard.
func (t Target) Table(name string) string { return dbutil.Table(t.Schema, name) }

// Router resolves keys to shards. It is safe for concurrent use.
type Router struct {
	store *shardmap.Store
	opts  Options

	mu      sync.Mutex
	m       *shardmap.Map
	checked time.Time
	pools   map[string]*sql.DB
}

// New returns a router reading the shard map from store.
func New(store *shardmap.Store, opts Options) *Router {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = 30 * time.Second
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 16
	}
	return &Router{store: store, opts: opts, pools: map[string]*sql.DB{}}
}

// Map returns the cached shard map, reloading it when its version changed.
func (r *Router) Map(ctx context.Context) (*shardmap.Map, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m != nil && time.Since(r.checked) < r.opts.TTL {
		return r.m, nil
	}
	if r.m != nil {
		v, err := r.store.Version(ctx)
		if err != nil {
			return nil, err
		}
		if v == r.m.Version {
			r.checked = time.Now()
			return r.m, nil
		}
	}
	m, err := r.store.Load(ctx)
	if err != nil {
		return nil, err
	}
	r.m, r.checked = m, time.Now()
	return m, nil
}

// Invalidate forces the next lookup to check the shard map's version.
func (r *Router) Invalidate() {
	r.mu.Lock()
	r.checked = time.Time{}
	r.mu.Unlock()
}

// Resolve returns the shard of key for a sharded table. It returns ErrOffline
// (with the target filled in) while the mapping is offline.
func (r *Router) Resolve(ctx context.Context, table, key string) (Target, error) {
	m, err := r.Map(ctx)
	if err != nil {
		return Target{}, err
	}
	f, _, ok := m.TableFunction(table)
	if !ok {
		return Target{}, fmt.Errorf("table %q is not sharded in the shard map (global tables live in every shard)", table)
	}
	res, err := m.Lookup(f, key)
	if err != nil {
		return Target{}, err
	}
	db, err := r.pool(ctx, res.Location.Addr())
	if err != nil {
		return Target{}, err
	}
	t := Target{Location: res.Location, Offline: res.Mapping.Status == shardmap.Offline, DB: db}
	if t.Offline {
		return t, ErrOffline
	}
	return t, nil
}

func (r *Router) pool(ctx context.Context, addr dbutil.Addr) (*sql.DB, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if db, ok := r.pools[addr.String()]; ok {
		return db, nil
	}
	db, err := dbutil.Open(ctx, addr, r.opts.Creds, "")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(r.opts.MaxConns)
	db.SetMaxIdleConns(r.opts.MaxConns)
	r.pools[addr.String()] = db
	return db, nil
}

// IsMoved reports the errors after which the key must be looked up again:
// the book's 1290 (read-only: a fence), 1146 (table gone: the shard moved
// away), 1049 (schema gone), 2006/2013 and broken connections (server gone).
func IsMoved(err error) bool {
	switch dbutil.ErrNumber(err) {
	case 1290, 1146, 1049, 2006, 2013:
		return true
	}
	// A connection that died mid-statement: the server went away (it may have been stopped or moved).
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn)
}

// Retryable reports errors Do retries: offline mappings and moved shards.
func Retryable(err error) bool {
	return errors.Is(err, ErrOffline) || errors.Is(err, errMovedWhileRunning) || IsMoved(err)
}

// Do runs fn against key's shard, retrying with back-off while the mapping is
// offline or the shard has moved, for up to Options.RetryFor. fn must be safe
// to run again after a failed attempt (a single autocommit statement is).
func (r *Router) Do(ctx context.Context, table, key string, fn func(ctx context.Context, t Target) error) error {
	deadline := time.Now().Add(r.opts.RetryFor)
	wait := 2 * time.Millisecond
	for {
		t, err := r.Resolve(ctx, table, key)
		if err == nil {
			checked := r.checkedAt()
			if err = fn(ctx, t); err == nil {
				err = r.stillThere(ctx, table, key, t, checked, deadline)
			}
		}
		if err == nil || !Retryable(err) || time.Now().After(deadline) {
			return err
		}
		r.Invalidate()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if wait < 100*time.Millisecond {
			wait *= 2
		}
	}
}

func (r *Router) checkedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checked
}

// errMovedWhileRunning: the key's shard moved while fn ran; Do runs it again.
var errMovedWhileRunning = errors.New("the shard moved while the statement ran")

// ErrUnconfirmed is returned by Do when fn succeeded at a shard but the
// shard map could not be read again (within RetryFor) to confirm that the
// shard still served the key: the write ran, and whether it counts is not
// known. An application treats it as any write of unknown outcome (a lost
// connection at COMMIT), not as a write that did not happen.
var ErrUnconfirmed = errors.New("the write ran, but the shard map could not be read to confirm its shard still serves the key: its outcome is unknown")

// stillThere checks, after fn succeeded against t, that the key still lives
// at t when the map was last checked longer than TTL ago. shardctl keeps a
// copy it switched away from intact and fenced for its route grace (at
// least the TTL), so a write that ended within TTL of the check either
// reached the serving copy or was turned away by the fence; a write that
// took longer may have reached a copy being cleaned up, where a DELETE or
// UPDATE that matches no row succeeds without doing anything. The map is
// read again until deadline: a sharding database that is restarting must
// not turn a committed write into a plain failure (the caller would count
// it as not done), so past the deadline the answer is ErrUnconfirmed.
func (r *Router) stillThere(ctx context.Context, table, key string, t Target, checked, deadline time.Time) error {
	if time.Since(checked) <= r.opts.TTL {
		return nil
	}
	wait := 5 * time.Millisecond
	for {
		r.Invalidate()
		now, err := r.Resolve(ctx, table, key)
		if err == nil || errors.Is(err, ErrOffline) {
			if now.Location.Addr() == t.Location.Addr() && now.Location.Schema == t.Location.Schema {
				return nil // offline here too: the write committed before the fence went in
			}
			return errMovedWhileRunning
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%w (shard %d at %s): %w", ErrUnconfirmed, t.ShardID, t.Addr(), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// Close closes the shard server pools.
func (r *Router) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, db := range r.pools {
		db.Close()
		delete(r.pools, k)
	}
}
