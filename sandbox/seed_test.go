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
