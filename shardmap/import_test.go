package shardmap_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// A fleet's tenants registered at once: one transaction, one version bump,
// the whole file checked before a point is written; a re-point of a tenant
// with rows refused with the key move; export and import round trip.
func TestImportPoints(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	for _, q := range []string{"DROP DATABASE IF EXISTS sm_imp_a", "CREATE DATABASE sm_imp_a",
		"CREATE TABLE sm_imp_a.orders (id INT PRIMARY KEY, tenant INT, KEY (tenant))", "INSERT INTO sm_imp_a.orders VALUES (1, 77), (2, 77), (3, 90001)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s := newStore(t, "sm_import")
	s.Rows = shardmap.ShardRows(sandbox.Creds())
	addr := env.Addr(1)
	a := must[int](t)(s.AddShard(ctx, addr.Host, addr.Port, "sm_imp_a"))
	b := must[int](t)(s.AddShard(ctx, addr.Host, addr.Port, "sm_imp_b"))
	must[int](t)(s.AddFunction(ctx, "tenants", shardmap.List, keyspace.IntKey))
	check(t, s.AddColumn(ctx, "orders", "tenant", "tenants"))
	m := must[*shardmap.Map](t)(s.Load(ctx))
	f := must[shardmap.Function](t)(m.ImportFunction("", nil))

	const n = 100_000
	var csv bytes.Buffer
	csv.WriteString("key,shard\n")
	for k := 1; k <= n; k++ {
		fmt.Fprintf(&csv, "%d,%d\n", k, map[bool]int{true: a, false: b}[k <= n/2])
	}
	ps := must[[]shardmap.PointLine](t)(shardmap.ParsePoints(bytes.NewReader(csv.Bytes())))
	v0 := must[int64](t)(s.Version(ctx))

	// A duplicate at the end refuses the whole file, naming its line.
	dup := append(append([]shardmap.PointLine(nil), ps...), shardmap.PointLine{Line: n + 2, Key: "17", Shard: b})
	if _, err := s.Import(ctx, f, dup); !errors.Is(err, shardmap.ErrBadInput) || !strings.Contains(err.Error(), fmt.Sprintf("line %d: key 17 is on line 18", n+2)) {
		t.Fatalf("a duplicate: %v", err)
	}
	if v := must[int64](t)(s.Version(ctx)); v != v0 {
		t.Fatalf("a refused import moved the version %d -> %d", v0, v)
	}

	im := must[*shardmap.Import](t)(s.Import(ctx, f, ps))
	if im.Counts() != fmt.Sprintf("%d added, 0 re-pointed, 0 unchanged", n) {
		t.Fatalf("import: %s", im.Counts())
	}
	if v := must[int64](t)(s.Version(ctx)); v != v0+1 {
		t.Fatalf("100,000 points took %d version bumps, want 1", v-v0)
	}
	m = must[*shardmap.Map](t)(s.Load(ctx))
	if r := must[shardmap.Resolution](t)(m.Lookup(f, "77")); r.Location.ShardID != a {
		t.Fatalf("key 77 -> shard %d", r.Location.ShardID)
	}
	// Again: every point unchanged, no bump.
	im = must[*shardmap.Import](t)(s.Import(ctx, f, ps))
	if im.Changes() || im.Unchanged != n || must[int64](t)(s.Version(ctx)) != v0+1 {
		t.Fatalf("a re-run: %s", im.Counts())
	}

	// Key 77 has rows on shard a: re-pointing it is refused with the move.
	before := must[*shardmap.Map](t)(s.Load(ctx))
	move := []shardmap.PointLine{{Line: 1, Key: "5", Shard: b}, {Line: 2, Key: "77", Shard: b}, {Line: 3, Key: "100001", Shard: a}}
	_, err := s.Import(ctx, f, move)
	want := fmt.Sprintf("line 2: key 77 maps to shard %d, and shard %d has its rows (table orders)", a, a)
	if !errors.Is(err, shardmap.ErrBadInput) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("shardctl move --shard %d --keys 77 --into %d", a, b)) {
		t.Fatalf("re-pointing a tenant with rows: %v", err)
	}
	if after := must[*shardmap.Map](t)(s.Load(ctx)); !reflect.DeepEqual(before, after) {
		t.Fatal("a refused re-point changed the shard map")
	}
	// Keys without rows change hands, and come back online.
	im = must[*shardmap.Import](t)(s.Import(ctx, f, []shardmap.PointLine{move[0], move[2]}))
	if im.Counts() != "1 added, 1 re-pointed, 0 unchanged" {
		t.Fatalf("re-point: %s", im.Counts())
	}
	m = must[*shardmap.Map](t)(s.Load(ctx))
	if r := must[shardmap.Resolution](t)(m.Lookup(f, "5")); r.Location.ShardID != b || r.Mapping.Status != shardmap.Online {
		t.Fatalf("key 5 after the re-point: shard %d, %s", r.Location.ShardID, r.Mapping.Status)
	}

	// Export, then import into a fresh map: the same points.
	var out bytes.Buffer
	check(t, shardmap.WritePointsCSV(&out, m.ExportPoints(f)))
	s2 := newStore(t, "sm_import2")
	must[int](t)(s2.AddShard(ctx, addr.Host, addr.Port, "sm_imp_a"))
	must[int](t)(s2.AddShard(ctx, addr.Host, addr.Port, "sm_imp_b"))
	must[int](t)(s2.AddFunction(ctx, "tenants", shardmap.List, keyspace.IntKey))
	back := must[[]shardmap.PointLine](t)(shardmap.ParsePoints(&out))
	f2 := must[shardmap.Function](t)(must[*shardmap.Map](t)(s2.Load(ctx)).ImportFunction("", back))
	must[*shardmap.Import](t)(s2.Import(ctx, f2, back))
	m2 := must[*shardmap.Map](t)(s2.Load(ctx))
	if got, want := m2.ExportPoints(f2), m.ExportPoints(f); !reflect.DeepEqual(got, want) {
		t.Fatalf("the round trip changed the points (%d against %d)", len(got), len(want))
	}
}
