package sandbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

func TestSeedSpreadsShardsAndIsIdempotent(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	store := shardmap.New(env.DB(t, 1, ""), "seed_map")
	cfg := sandbox.SeedConfig{Servers: []dbutil.Addr{env.Addr(1), env.Addr(2), env.Addr(3)}, Creds: sandbox.Creds(), Shards: 6, Employees: 200, SchemaPrefix: "seedtest_"}
	first, err := sandbox.Seed(ctx, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := store.Version(ctx)
	second, err := sandbox.Seed(ctx, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := store.Version(ctx)
	if v1 != v2 || fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatalf("second seed changed something: version %d -> %d\n%v\n%v", v1, v2, first, second)
	}
	m, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Locations) != 6 {
		t.Fatalf("%d locations, want 6", len(m.Locations))
	}
	servers := map[string]int{}
	for _, s := range first {
		servers[s.Server]++
		if s.Rows < 200*5 || s.Rows > 200*15 {
			t.Fatalf("shard %d has %d rows for 200 employees", s.ShardID, s.Rows)
		}
	}
	if len(servers) != 3 {
		t.Fatalf("shards on %d servers, want 3", len(servers))
	}
	// Every seeded key resolves to the shard that holds it.
	f, _ := m.Function("employees")
	for _, s := range first {
		res, err := m.Lookup(f, fmt.Sprint(s.Lower+1))
		if err != nil || res.Location.ShardID != s.ShardID {
			t.Fatalf("key %d -> %+v, %v; want shard %d", s.Lower+1, res.Location, err, s.ShardID)
		}
	}
}

// A shard moved since it was seeded is left where it lives: seeding again
// neither recreates it on its old server nor touches the shard map.
func TestSeedFollowsMovedShards(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	store := shardmap.New(env.DB(t, 1, ""), "seed_moved_map")
	cfg := sandbox.SeedConfig{Servers: []dbutil.Addr{env.Addr(1), env.Addr(2)}, Creds: sandbox.Creds(), Shards: 2, Employees: 20, SchemaPrefix: "seedmv_"}
	first, err := sandbox.Seed(ctx, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// "Move" shard 1 to server 3 by hand.
	if err := sandbox.CreateEmployeesSchema(ctx, env.DB(t, 3, ""), first[0].Schema); err != nil {
		t.Fatal(err)
	}
	if _, err := env.DB(t, 1, "").Exec("DROP DATABASE " + first[0].Schema); err != nil {
		t.Fatal(err)
	}
	a3 := env.Addr(3)
	if err := store.Apply(ctx, "move", []shardmap.Change{{Op: shardmap.OpMoveLocation, ShardID: first[0].ShardID, Host: a3.Host, Port: a3.Port}}); err != nil {
		t.Fatal(err)
	}
	v, _ := store.Version(ctx)
	again, err := sandbox.Seed(ctx, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v2, _ := store.Version(ctx); v2 != v || again[0].Server != a3.String() {
		t.Fatalf("seed after a move: version %d -> %d, shard 1 at %s", v, v2, again[0].Server)
	}
	var n int
	env.DB(t, 1, "").QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", first[0].Schema).Scan(&n)
	if n != 0 {
		t.Fatal("seed recreated the moved shard on its old server")
	}
}
