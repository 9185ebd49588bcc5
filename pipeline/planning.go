package pipeline

import (
	"context"
	"database/sql"
	"sync"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// Pools holds one connection pool per server for one planning run: reading
// the tables, choosing a split point, the operation's checks and the
// preflight share them instead of each opening its own.
type Pools struct {
	creds dbutil.Creds
	mu    sync.Mutex
	dbs   map[dbutil.Addr]*sql.DB
}

// WithPools returns env with a fresh set of pools for a planning run; the
// planner closes them (env.Pools.Close) when the plan is made.
func WithPools(env Env) Env {
	env.Pools = &Pools{creds: env.Creds, dbs: map[dbutil.Addr]*sql.DB{}}
	return env
}

// DB returns the pool of addr, opening it the first time.
func (ps *Pools) DB(ctx context.Context, addr dbutil.Addr) (*sql.DB, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if db := ps.dbs[addr]; db != nil {
		return db, nil
	}
	db, err := dbutil.Open(ctx, addr, ps.creds, "")
	if err != nil {
		return nil, err
	}
	ps.dbs[addr] = db
	return db, nil
}

// Close closes every pool; a nil Pools is fine.
func (ps *Pools) Close() {
	if ps == nil {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for a, db := range ps.dbs {
		db.Close()
		delete(ps.dbs, a)
	}
}

// open returns addr's pool: the planning run's when env has pools (release
// does nothing), else a new one that release closes.
func (env Env) open(ctx context.Context, addr dbutil.Addr) (db *sql.DB, release func(), err error) {
	if env.Pools != nil {
		db, err := env.Pools.DB(ctx, addr)
		return db, func() {}, err
	}
	db, err = dbutil.Open(ctx, addr, env.Creds, "")
	if err != nil {
		return nil, nil, err
	}
	return db, func() { db.Close() }, nil
}

// Skeleton fills in what every operation's plan holds the same way: the
// options, the shard map, the source shard, the target, and one lock per
// shard the operation changes.
func Skeleton(env Env, p *plans.Plan, src shardmap.Location, target plans.Endpoint, opts plans.Options, lockShards ...int) {
	p.Options = opts
	p.ShardMap = plans.Endpoint{Schema: env.Store.Schema}
	p.Source = plans.Endpoint{ShardID: src.ShardID, Host: src.Host, Port: src.Port, Schema: src.Schema}
	p.Target = target
	p.Locks = nil
	for _, id := range lockShards {
		p.Locks = append(p.Locks, lock.Name(env.Store.Schema, id))
	}
}
