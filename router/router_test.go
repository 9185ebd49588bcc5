package router_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/router"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestRouterFollowsTheShardMap(t *testing.T) {
	ctx := context.Background()
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	store := shardmap.New(db, "router_map")
	shards, err := sandbox.Seed(ctx, store, sandbox.SeedConfig{Servers: []dbutil.Addr{env.Addr(1), env.Addr(2)}, Creds: sandbox.Creds(), Shards: 2, Employees: 10, SchemaPrefix: "router_s"})
	if err != nil {
		t.Fatal(err)
	}
	r := router.New(store, router.Options{Creds: sandbox.Creds(), TTL: 50 * time.Millisecond, RetryFor: 3 * time.Second})
	defer r.Close()
	tg, err := r.Resolve(ctx, "salaries", "1000005")
	if err != nil || tg.ShardID != shards[1].ShardID || tg.Addr() != env.Addr(2) {
		t.Fatalf("resolve: %+v %v", tg.Location, err)
	}
	if _, err := r.Resolve(ctx, "departments", "1"); err == nil {
		t.Fatal("a global table resolved to one shard")
	}
	// Offline: Resolve says so; Do waits and succeeds once the mapping is back online.
	m, _ := store.Load(ctx)
	ref := m.ShardMappings(shards[1].ShardID)[0].Ref()
	if err := store.Apply(ctx, "off", []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Offline}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond) // past the TTL: the version check sees the change
	if _, err := r.Resolve(ctx, "employees", "1000005"); !errors.Is(err, router.ErrOffline) {
		t.Fatalf("offline mapping: %v", err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		store.Apply(ctx, "on", []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Online}})
	}()
	start := time.Now()
	calls := 0
	err = r.Do(ctx, "employees", "1000005", func(ctx context.Context, t router.Target) error {
		calls++
		_, err := t.DB.ExecContext(ctx, "UPDATE "+t.Table("employees")+" SET last_name = 'Routed' WHERE emp_no = 1000005")
		return err
	})
	if err != nil || calls != 1 || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("Do across an offline window: err %v, calls %d, took %s", err, calls, time.Since(start))
	}
	// A moved shard: the table is gone where the cache points (1146); Do looks again and follows the new location.
	d2 := env.DB(t, 2, "")
	if err := sandbox.CreateEmployeesSchema(ctx, env.DB(t, 3, ""), shards[1].Schema); err != nil {
		t.Fatal(err)
	}
	if _, err := d2.Exec("DROP DATABASE " + dbutil.QuoteIdent(shards[1].Schema)); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		store.Apply(ctx, "move", []shardmap.Change{{Op: shardmap.OpMoveLocation, ShardID: shards[1].ShardID, Host: env.Addr(3).Host, Port: env.Addr(3).Port}})
	}()
	var where dbutil.Addr
	err = r.Do(ctx, "employees", "1000007", func(ctx context.Context, t router.Target) error {
		where = t.Addr()
		_, err := t.DB.ExecContext(ctx, "INSERT INTO "+t.Table("employees")+" VALUES (1000007, '1960-01-01', 'A', 'B', 'M', '1990-01-01')")
		return err
	})
	if err != nil || where != env.Addr(3) {
		t.Fatalf("after the move: err %v, wrote to %s", err, where)
	}
	// A write that ends more than TTL after the map was last checked, while
	// the shard moves back: Do checks the map again and runs it again where
	// the key lives now (the old copy may be one a cleanup is emptying, where
	// an UPDATE that matches no row succeeds).
	if err := sandbox.CreateEmployeesSchema(ctx, d2, shards[1].Schema); err != nil {
		t.Fatal(err)
	}
	var wrote []dbutil.Addr
	err = r.Do(ctx, "employees", "1000009", func(ctx context.Context, t router.Target) error {
		wrote = append(wrote, t.Addr())
		if len(wrote) == 1 {
			if err := store.Apply(ctx, "move back", []shardmap.Change{{Op: shardmap.OpMoveLocation, ShardID: shards[1].ShardID, Host: env.Addr(2).Host, Port: env.Addr(2).Port}}); err != nil {
				return err
			}
			time.Sleep(80 * time.Millisecond) // a slow statement: past the TTL
		}
		_, err := t.DB.ExecContext(ctx, "UPDATE "+t.Table("employees")+" SET last_name = 'Slow' WHERE emp_no = 1000009")
		return err
	})
	if err != nil || len(wrote) != 2 || wrote[0] != env.Addr(3) || wrote[1] != env.Addr(2) {
		t.Fatalf("a write slower than the TTL across a move: err %v, wrote to %v", err, wrote)
	}
}

// A write that succeeded but whose shard cannot be confirmed because the
// shard map cannot be read (the sharding database restarting) is not a
// plain failure: the caller would count a committed write as not done (a
// ledger saw a row it believed deleted, re-created by an "unacknowledged"
// insert that had committed). Do reads the map again until RetryFor; past
// it, the answer is ErrUnconfirmed, a write of unknown outcome.
func TestWriteConfirmedWhenTheMapReturns(t *testing.T) {
	ctx := context.Background()
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	store := shardmap.New(db, "router_unconf")
	if _, err := sandbox.Seed(ctx, store, sandbox.SeedConfig{Servers: []dbutil.Addr{env.Addr(1), env.Addr(2)}, Creds: sandbox.Creds(), Shards: 2, Employees: 10, SchemaPrefix: "router_u"}); err != nil {
		t.Fatal(err)
	}
	version := dbutil.Table("router_unconf", "version")
	away := dbutil.Table("router_unconf", "version_away")
	r := router.New(store, router.Options{Creds: sandbox.Creds(), TTL: 20 * time.Millisecond, RetryFor: 5 * time.Second})
	defer r.Close()
	// The map unreadable while the statement runs, readable again 300 ms later:
	// the write is confirmed where it ran, and not run twice.
	calls := 0
	err := r.Do(ctx, "employees", "1000003", func(ctx context.Context, tg router.Target) error {
		calls++
		if calls == 1 {
			if _, err := db.ExecContext(ctx, "RENAME TABLE "+version+" TO "+away); err != nil {
				return err
			}
			go func() {
				time.Sleep(300 * time.Millisecond)
				db.ExecContext(ctx, "RENAME TABLE "+away+" TO "+version)
			}()
			time.Sleep(40 * time.Millisecond) // past the TTL
		}
		_, err := tg.DB.ExecContext(ctx, "UPDATE "+tg.Table("employees")+" SET last_name = 'Held' WHERE emp_no = 1000003")
		return err
	})
	if err != nil || calls != 1 {
		t.Fatalf("a write while the map was unreadable for 300 ms: err %v, calls %d (want nil, 1)", err, calls)
	}
	// The map unreadable for good: past RetryFor the write's outcome is unknown.
	gone := shardmap.New(env.DB(t, 1, ""), "router_unconf")
	r2 := router.New(gone, router.Options{Creds: sandbox.Creds(), TTL: 20 * time.Millisecond, RetryFor: 300 * time.Millisecond})
	defer r2.Close()
	err = r2.Do(ctx, "employees", "1000003", func(ctx context.Context, tg router.Target) error {
		if _, err := tg.DB.ExecContext(ctx, "UPDATE "+tg.Table("employees")+" SET last_name = 'Lost' WHERE emp_no = 1000003"); err != nil {
			return err
		}
		time.Sleep(40 * time.Millisecond)
		return gone.DB.Close()
	})
	if !errors.Is(err, router.ErrUnconfirmed) {
		t.Fatalf("a write whose shard cannot be confirmed: %v, want ErrUnconfirmed", err)
	}
}
