package shardmap_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/shardmap"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var ctx = context.Background()

func newStore(t *testing.T, name string) *shardmap.Store {
	t.Helper()
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	s := shardmap.New(db, name)
	if _, err := db.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
		t.Fatal(err)
	}
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Init(ctx); err != nil { // idempotent
		t.Fatal(err)
	}
	return s
}

func must[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The tool's lookup must agree with the book's own SQL, run on the tables.
func TestLookupAgreesWithBookQueries(t *testing.T) {
	testenv.Get(t).NeedMD5(t) // the book's hash query calls MD5() in the server
	s := newStore(t, "sm_lookup")
	var shards []int
	for i := 1; i <= 5; i++ {
		shards = append(shards, must[int](t)(s.AddShard(ctx, "127.0.0.1", 3306+i, fmt.Sprintf("shard_%d", i))))
	}
	rf := must[int](t)(s.AddFunction(ctx, "emp", shardmap.Range, keyspace.IntKey))
	sf := must[int](t)(s.AddFunction(ctx, "names", shardmap.Range, keyspace.StringKey))
	hf := must[int](t)(s.AddFunction(ctx, "ring", shardmap.Hash, keyspace.StringKey))
	for i, lb := range []string{"-1000", "0", "100000", "250000", "900000"} {
		check(t, s.AddRange(ctx, "emp", lb, shards[i]))
	}
	for i, lb := range []string{"", "f", "m", "s"} {
		check(t, s.AddRange(ctx, "names", lb, shards[i]))
	}
	for i := range shards {
		h, _ := keyspace.HashOf(fmt.Sprintf("server-%d", i))
		check(t, s.AddHashPoint(ctx, "ring", h, shards[i]))
	}
	m := must[*shardmap.Map](t)(s.Load(ctx))
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 3000; i++ {
		k := rng.Int63n(2_000_000) - 500
		if i%100 == 0 {
			k = []int64{-1000, 0, 99999, 100000, 899999, 900000}[i/100%6]
		}
		f, _ := m.Function("emp")
		res, err := m.Lookup(f, fmt.Sprint(k))
		if err != nil {
			t.Fatal(err)
		}
		want := must[int](t)(s.BookRangeLookup(ctx, rf, keyspace.IntKey, k))
		if res.Location.ShardID != want {
			t.Fatalf("range key %d: tool says shard %d, book query says %d", k, res.Location.ShardID, want)
		}
	}
	for i := 0; i < 1000; i++ {
		k := fmt.Sprintf("%c%x", 'a'+rng.Intn(26), rng.Int63())
		f, _ := m.Function("names")
		res := must[shardmap.Resolution](t)(m.Lookup(f, k))
		want := must[int](t)(s.BookRangeLookup(ctx, sf, keyspace.StringKey, k))
		if res.Location.ShardID != want {
			t.Fatalf("string key %q: tool %d, book %d", k, res.Location.ShardID, want)
		}
	}
	for i := 0; i < 3000; i++ {
		k := fmt.Sprint(rng.Int63n(10_000_000))
		f, _ := m.Function("ring")
		res := must[shardmap.Resolution](t)(m.Lookup(f, k))
		want := must[int](t)(s.BookHashLookup(ctx, hf, k))
		if res.Location.ShardID != want {
			t.Fatalf("hash key %s: tool %d, book %d", k, res.Location.ShardID, want)
		}
	}
	// Below the first range there is no mapping.
	f, _ := m.Function("emp")
	if _, err := m.Lookup(f, "-5000"); !errors.Is(err, shardmap.ErrNoMapping) {
		t.Fatalf("key below the first range: %v", err)
	}
}

// Every operation of the package, then the same operation again: the second run changes nothing.
func TestMappingOperationsAreIdempotent(t *testing.T) {
	s := newStore(t, "sm_ops")
	a := must[int](t)(s.AddShard(ctx, "127.0.0.1", 3306, "shard_a"))
	b := must[int](t)(s.AddShard(ctx, "127.0.0.1", 3307, "shard_b"))
	if again := must[int](t)(s.AddShard(ctx, "127.0.0.1", 3306, "shard_a")); again != a {
		t.Fatalf("add-shard again gave %d, want %d", again, a)
	}
	fid := must[int](t)(s.AddFunction(ctx, "emp", shardmap.Range, keyspace.IntKey))
	hid := must[int](t)(s.AddFunction(ctx, "ring", shardmap.Hash, keyspace.IntKey))
	lid := must[int](t)(s.AddFunction(ctx, "region", shardmap.List, keyspace.StringKey))
	check(t, s.AddColumn(ctx, "employees", "emp_no", "emp"))
	check(t, s.AddRange(ctx, "emp", "0", a))
	check(t, s.AddHashPoint(ctx, "ring", "00000000000000000000000000000000", a))
	check(t, s.AddPoint(ctx, "region", "eu", a))

	at := keyspace.IntK(500)
	zero := keyspace.IntK(0)
	upper := shardmap.Ref{FuncID: fid, Kind: shardmap.Range, Lower: &at}
	hp := shardmap.Ref{FuncID: hid, Kind: shardmap.Hash, Hash: "80000000000000000000000000000000"}
	eu := keyspace.StrK("eu")
	steps := []struct {
		name    string
		changes []shardmap.Change
		check   func(m *shardmap.Map)
	}{
		{"split", []shardmap.Change{{Op: shardmap.OpSplitRange, Ref: shardmap.Ref{FuncID: fid}, At: &at}}, func(m *shardmap.Map) {
			if len(m.MappingsOf(fid)) != 2 || m.MappingsOf(fid)[1].ShardID != a {
				t.Fatalf("after split: %+v", m.MappingsOf(fid))
			}
		}},
		{"offline", []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: upper, Status: shardmap.Offline}}, func(m *shardmap.Map) {
			ms := m.MappingsOf(fid)
			if ms[1].Status != shardmap.Offline || ms[0].Status != shardmap.Online {
				t.Fatalf("after offline: %+v", ms)
			}
		}},
		{"repoint+online", []shardmap.Change{{Op: shardmap.OpRepoint, Ref: upper, ShardID: b}, {Op: shardmap.OpSetStatus, Ref: upper, Status: shardmap.Online}}, func(m *shardmap.Map) {
			ms := m.MappingsOf(fid)
			if ms[1].ShardID != b || ms[1].Status != shardmap.Online {
				t.Fatalf("after repoint: %+v", ms)
			}
		}},
		{"repoint back", []shardmap.Change{{Op: shardmap.OpRepoint, Ref: upper, ShardID: a}}, nil},
		{"merge", []shardmap.Change{{Op: shardmap.OpMergeRange, Ref: upper}}, func(m *shardmap.Map) {
			if ms := m.MappingsOf(fid); len(ms) != 1 || ms[0].Lower.Compare(zero) != 0 {
				t.Fatalf("after merge: %+v", ms)
			}
		}},
		{"hash point", []shardmap.Change{{Op: shardmap.OpAddHashPoint, Ref: hp, ShardID: b, Status: shardmap.Offline}}, func(m *shardmap.Map) {
			if len(m.MappingsOf(hid)) != 2 {
				t.Fatalf("after add hash point: %+v", m.MappingsOf(hid))
			}
		}},
		{"remove hash point", []shardmap.Change{{Op: shardmap.OpRemoveMapping, Ref: hp}}, nil},
		{"list offline", []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: shardmap.Ref{FuncID: lid, Kind: shardmap.List, Point: &eu}, Status: shardmap.Offline}}, nil},
		{"move location", []shardmap.Change{{Op: shardmap.OpMoveLocation, ShardID: b, Host: "10.0.0.9", Port: 3310}}, func(m *shardmap.Map) {
			l, _ := m.Location(b)
			if l.Host != "10.0.0.9" || l.Port != 3310 {
				t.Fatalf("after move: %+v", l)
			}
		}},
		{"remove location", []shardmap.Change{{Op: shardmap.OpRemoveLocation, ShardID: b}}, func(m *shardmap.Map) {
			if _, err := m.Location(b); err == nil {
				t.Fatal("location still there")
			}
		}},
	}
	for _, st := range steps {
		v0 := must[int64](t)(s.Version(ctx))
		check(t, s.Apply(ctx, st.name, st.changes))
		v1 := must[int64](t)(s.Version(ctx))
		if v1 != v0+1 {
			t.Fatalf("%s: version %d -> %d, want one bump", st.name, v0, v1)
		}
		m1 := must[*shardmap.Map](t)(s.Load(ctx))
		if st.check != nil {
			st.check(m1)
		}
		check(t, s.Apply(ctx, st.name, st.changes)) // re-run
		m2 := must[*shardmap.Map](t)(s.Load(ctx))
		if m2.Version != v1 || !reflect.DeepEqual(m1, m2) {
			t.Fatalf("%s: re-run changed the map (version %d -> %d)", st.name, v1, m2.Version)
		}
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	s := newStore(t, "sm_bad")
	a := must[int](t)(s.AddShard(ctx, "127.0.0.1", 3306, "shard_a"))
	b := must[int](t)(s.AddShard(ctx, "127.0.0.1", 3307, "shard_b"))
	must[int](t)(s.AddFunction(ctx, "emp", shardmap.Range, keyspace.IntKey))
	must[int](t)(s.AddFunction(ctx, "ring", shardmap.Hash, keyspace.IntKey))
	check(t, s.AddRange(ctx, "emp", "0", a))
	check(t, s.AddRange(ctx, "emp", "1000", b))
	check(t, s.AddRange(ctx, "emp", "2000", a))
	before := must[*shardmap.Map](t)(s.Load(ctx))
	bad := map[string]error{
		"duplicate range":     s.AddRange(ctx, "emp", "1000", a),
		"overlapping range":   s.AddRange(ctx, "emp", "1500", a),
		"unknown shard":       s.AddRange(ctx, "emp", "5000", 99),
		"string for int":      s.AddRange(ctx, "emp", "abc", a),
		"bad hash":            s.AddHashPoint(ctx, "ring", "xyz", a),
		"unknown function":    s.AddRange(ctx, "nope", "1", a),
		"bad sharding type":   func() error { _, err := s.AddFunction(ctx, "x", "CIRCLE", keyspace.IntKey); return err }(),
		"merge other shard":   s.Apply(ctx, "merge", []shardmap.Change{{Op: shardmap.OpMergeRange, Ref: shardmap.Ref{FuncID: 1, Kind: shardmap.Range, Lower: ptr(keyspace.IntK(1000))}}}),
		"remove used shard":   s.Apply(ctx, "rm", []shardmap.Change{{Op: shardmap.OpRemoveLocation, ShardID: a}}),
		"repoint to no shard": s.Apply(ctx, "rp", []shardmap.Change{{Op: shardmap.OpRepoint, Ref: shardmap.Ref{FuncID: 1, Kind: shardmap.Range, Lower: ptr(keyspace.IntK(0))}, ShardID: 42}}),
	}
	for name, err := range bad {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, name := range []string{"duplicate range", "overlapping range", "unknown shard", "string for int", "bad hash", "bad sharding type", "merge other shard", "remove used shard"} {
		if !errors.Is(bad[name], shardmap.ErrBadInput) {
			t.Errorf("%s: %v is not ErrBadInput", name, bad[name])
		}
	}
	after := must[*shardmap.Map](t)(s.Load(ctx))
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("refused input changed the shard map:\nbefore %+v\nafter  %+v", before, after)
	}
}

func ptr[T any](v T) *T { return &v }
