package shardmap_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/shardmap"
)

// fleetMap is an in-memory map of n shards under a RANGE, a LIST and a
// HASH function, its mappings in a shuffled order (a loaded map's order is
// the store's, not the key order).
func fleetMap(n int, rng *rand.Rand) *shardmap.Map {
	m := &shardmap.Map{Functions: []shardmap.Function{
		{ID: 1, Name: "emp", Type: shardmap.Range, KeyType: keyspace.IntKey},
		{ID: 2, Name: "tenants", Type: shardmap.List, KeyType: keyspace.IntKey},
		{ID: 3, Name: "ring", Type: shardmap.Hash, KeyType: keyspace.StringKey},
	}}
	for i := 1; i <= n; i++ {
		m.Locations = append(m.Locations, shardmap.Location{ShardID: i, Host: "127.0.0.1", Port: 3306, Schema: fmt.Sprintf("s%d", i)})
		lower, _ := keyspace.ParseKey(fmt.Sprint((i-1)*1000), keyspace.IntKey)
		point, _ := keyspace.ParseKey(fmt.Sprint(i*7), keyspace.IntKey)
		h, _ := keyspace.HashOf(fmt.Sprintf("server-%d", i))
		m.Mappings = append(m.Mappings,
			shardmap.Mapping{FuncID: 1, Kind: shardmap.Range, Lower: &lower, ShardID: i, Status: shardmap.Online},
			shardmap.Mapping{FuncID: 2, Kind: shardmap.List, Point: &point, ShardID: i, Status: shardmap.Online},
			shardmap.Mapping{FuncID: 3, Kind: shardmap.Hash, Hash: h, ShardID: i, Status: shardmap.Online})
	}
	rng.Shuffle(len(m.Mappings), func(i, j int) { m.Mappings[i], m.Mappings[j] = m.Mappings[j], m.Mappings[i] })
	return m
}

// sortedLookup is Lookup's rule read off the mappings in key order, as the
// book states it: RANGE the greatest lower bound <= key, LIST the equal
// point, HASH the greatest point < MD5(key), else the greatest point.
func sortedLookup(m *shardmap.Map, f shardmap.Function, key string) int {
	ms := m.MappingsOf(f.ID)
	owner := 0
	switch f.Type {
	case shardmap.Range, shardmap.List:
		k, _ := keyspace.ParseKey(key, f.KeyType)
		for _, mp := range ms {
			if (f.Type == shardmap.Range && mp.Lower.Compare(k) <= 0) || (f.Type == shardmap.List && mp.Point.Compare(k) == 0) {
				owner = mp.ShardID
			}
		}
	case shardmap.Hash:
		h, _ := keyspace.HashOf(key)
		owner = ms[len(ms)-1].ShardID
		for _, mp := range ms {
			if mp.Hash < h {
				owner = mp.ShardID
			}
		}
	}
	return owner
}

// Lookup reads the mappings in the map's own order; it must agree with the
// rule read in key order on every function, keys below, between, on and
// above the bounds included. (TestLookupAgreesWithBookQueries checks the
// same against the book's SQL on a server.)
func TestLookupAgreesWithKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	m := fleetMap(50, rng)
	for _, f := range m.Functions {
		for i := 0; i < 2000; i++ {
			key := fmt.Sprint(rng.Int63n(60_000) - 1000)
			if f.Type == shardmap.List {
				key = fmt.Sprint(rng.Int63n(400))
			}
			want := sortedLookup(m, f, key)
			res, err := m.Lookup(f, key)
			if want == 0 {
				if err == nil {
					t.Fatalf("%s key %s: shard %d, want no mapping", f.Name, key, res.Mapping.ShardID)
				}
				continue
			}
			if err != nil || res.Mapping.ShardID != want || res.Location.ShardID != want {
				t.Fatalf("%s key %s: shard %d (%v), want %d", f.Name, key, res.Mapping.ShardID, err, want)
			}
		}
	}
}

// BenchmarkLookup is a router's lookup of one key in a fleet of 1,000
// shards (3,000 mappings).
func BenchmarkLookup(b *testing.B) {
	m := fleetMap(1000, rand.New(rand.NewSource(1)))
	for _, f := range m.Functions {
		b.Run(f.Name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := m.Lookup(f, fmt.Sprint(i%7000)); err != nil && f.Type != shardmap.List {
					b.Fatal(err)
				}
			}
		})
	}
}
