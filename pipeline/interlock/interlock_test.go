package interlock

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/mapfixture"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

func k(v int64) *keyspace.Key { x := keyspace.IntK(v); return &x }

func testMap() *shardmap.Map { return mapfixture.TwoRanges() }

func emp(f keyspace.Filter) *tables.Table {
	f.Column = "emp_no"
	return &tables.Table{Name: "employees", Filter: f}
}

func TestGuardRemoval(t *testing.T) {
	m := testMap()
	s1 := plans.Endpoint{Host: "a", Port: 1, Schema: "s1"}
	cases := []struct {
		name string
		at   plans.Endpoint
		t    *tables.Table
		live bool
	}{
		{"drop a live schema", s1, nil, true},
		{"drop it by another host name", plans.Endpoint{Host: "A", Port: 1, Schema: "s1"}, nil, true},
		{"drop an unmapped location", plans.Endpoint{Host: "c", Port: 3, Schema: "s3"}, nil, false},
		{"drop where nothing lives", plans.Endpoint{Host: "a", Port: 1, Schema: "other"}, nil, false},
		{"delete every row of a live shard", s1, &tables.Table{Name: "employees"}, true},
		{"delete a global table's rows", s1, &tables.Table{Name: "departments"}, true},
		{"prune what it does not own", s1, emp(keyspace.Filter{Ranges: []keyspace.Range{{Lo: k(0), Hi: k(1000)}}, Negate: true}), false},
		{"delete a moved-away range", s1, emp(keyspace.Filter{Ranges: []keyspace.Range{{Lo: k(1000), Hi: nil}}}), false},
		{"delete reaching an owned key", s1, emp(keyspace.Filter{Ranges: []keyspace.Range{{Lo: k(999), Hi: nil}}}), true},
		{"delete in the open last range", plans.Endpoint{Host: "b", Port: 2, Schema: "s2"}, emp(keyspace.Filter{Ranges: []keyspace.Range{{Lo: k(5000), Hi: nil}}}), true},
	}
	for _, c := range cases {
		err := checkRemoval(m, c.at, c.t)
		if c.live != errors.Is(err, ErrLive) {
			t.Errorf("%s: %v", c.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "version 7") {
			t.Errorf("%s: message names no map version: %v", c.name, err)
		}
	}
}

func TestCheckCurrent(t *testing.T) {
	m := testMap()
	p := plans.New("move", "")
	p.Source = plans.Endpoint{ShardID: 1, Host: "a", Port: 1, Schema: "s1"}
	p.Target = plans.Endpoint{ShardID: 1, Host: "d", Port: 4, Schema: "s1"}
	RecordAgainst(m, p)
	if err := Current(m, p); err != nil {
		t.Fatalf("fresh plan: %v", err)
	}
	// The plan's own split step cuts the range in two: the same keys.
	cut := testMap()
	cut.Mappings[0].Upper = k(500)
	cut.Mappings = append(cut.Mappings, shardmap.Mapping{FuncID: 1, Kind: shardmap.Range, Lower: k(500), Upper: k(1000), ShardID: 1, Status: shardmap.Offline})
	cut.Version = 8
	if err := Current(cut, p); err != nil {
		t.Fatalf("range cut in two: %v", err)
	}
	// Moved by another plan to this plan's target.
	moved := testMap()
	moved.Locations[0].Host, moved.Locations[0].Port = "d", 4
	if err := Current(moved, p); !errors.Is(err, ErrStale) || !errors.Is(err, failure.ErrRefused) || !strings.Contains(err.Error(), "now lives at d:4/s1") {
		t.Fatalf("moved shard: %v", err)
	}
	// Keys handed to another shard.
	shrunk := testMap()
	shrunk.Mappings[0].Upper = k(500)
	shrunk.Mappings = append(shrunk.Mappings, shardmap.Mapping{FuncID: 1, Kind: shardmap.Range, Lower: k(500), Upper: k(1000), ShardID: 2, Status: shardmap.Online})
	if err := Current(shrunk, p); !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "[0, 1000)") {
		t.Fatalf("shrunk shard: %v", err)
	}
	// Another shard lives at the target.
	occupied := testMap()
	occupied.Locations = append(occupied.Locations, shardmap.Location{ShardID: 9, Host: "d", Port: 4, Schema: "s1"})
	if err := Current(occupied, p); err != nil {
		t.Fatalf("an unused location at the target: %v", err)
	}
	occupied.Mappings = append(occupied.Mappings, shardmap.Mapping{FuncID: 1, Kind: shardmap.Range, Lower: k(-100), Upper: k(0), ShardID: 9, Status: shardmap.Online})
	if err := Current(occupied, p); !errors.Is(err, ErrStale) {
		t.Fatalf("occupied target: %v", err)
	}
	// After cutover the map must point where the cutover put it.
	p.Step(plans.StepCutover).State = plans.Done
	if err := Current(moved, p); err != nil {
		t.Fatalf("cut over, map agrees: %v", err)
	}
	if err := Current(m, p); !errors.Is(err, ErrStale) {
		t.Fatalf("cut over, map moved back: %v", err)
	}
	// Inside a reverse window a revert moves the shard back on purpose.
	p.Window = &plans.Window{Serving: plans.SideSource, Revert: []shardmap.Change{{Op: shardmap.OpMoveLocation, ShardID: 1, Host: "a", Port: 1}}}
	if err := Current(m, p); err != nil {
		t.Fatalf("reverted inside the window: %v", err)
	}
	third := testMap()
	third.Locations[0].Host, third.Locations[0].Port = "e", 5
	if err := Current(third, p); !errors.Is(err, ErrStale) {
		t.Fatalf("inside the window, moved elsewhere: %v", err)
	}
}

// A LIST shard's points are recorded as a count and a digest: the plan
// stays current while the shard owns the same points, goes stale when one
// is added or re-pointed, and a plan made before (format 1, every point
// listed) is read, folded and compared the same way.
func TestCurrentListPoints(t *testing.T) {
	m := &shardmap.Map{Version: 3,
		Locations: []shardmap.Location{{ShardID: 1, Host: "a", Port: 1, Schema: "s1"}, {ShardID: 2, Host: "b", Port: 2, Schema: "s2"}},
		Functions: []shardmap.Function{{ID: 1, Name: "tenants", Type: shardmap.List, KeyType: keyspace.IntKey}}}
	for i := int64(1); i <= 1000; i++ {
		m.Mappings = append(m.Mappings, shardmap.Mapping{FuncID: 1, Kind: shardmap.List, Point: k(i), ShardID: 1 + int(i%2), Status: shardmap.Online})
	}
	p := plans.New("move-keys", "")
	p.Source = plans.Endpoint{ShardID: 1, Host: "a", Port: 1, Schema: "s1"}
	p.Target = plans.Endpoint{ShardID: 2, Host: "b", Port: 2, Schema: "s2"}
	RecordAgainst(m, p)
	for _, o := range p.Against.Owned {
		if len(o.Keys.Points) != 0 || o.Points != 500 || o.Digest == "" {
			t.Fatalf("shard %d's points recorded as %+v; want a count of 500 and a digest", o.ShardID, o)
		}
	}
	// A format 1 plan listed every point; it is read as format 2.
	old := *p.Against
	old.Owned = nil
	for _, id := range []int{1, 2} {
		old.Owned = append(old.Owned, plans.Owned{ShardID: id, FuncID: 1, Keys: m.Owned(m.Functions[0], id, "key")})
	}
	v1 := *p
	v1.FormatVersion, v1.Against = 1, &old
	b, err := plans.Marshal(&v1)
	if err != nil {
		t.Fatal(err)
	}
	read, err := plans.Unmarshal(b)
	if err != nil {
		t.Fatalf("a format 1 plan: %v", err)
	}
	if read.FormatVersion != plans.FormatVersion || !sameKeys(read.Against.Owned, p.Against.Owned) {
		t.Fatalf("a format 1 plan read as format %d, owned %+v; want %+v", read.FormatVersion, read.Against.Owned, p.Against.Owned)
	}
	for _, q := range []*plans.Plan{p, read} {
		if err := Current(m, q); err != nil {
			t.Fatalf("the map it was made against: %v", err)
		}
		added := *m
		added.Mappings = append(slices.Clone(m.Mappings), shardmap.Mapping{FuncID: 1, Kind: shardmap.List, Point: k(5000), ShardID: 1, Status: shardmap.Online})
		if err := Current(&added, q); !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "500 list keys") || !strings.Contains(err.Error(), "501 list keys") {
			t.Fatalf("a point added to the source: %v", err)
		}
		swapped := *m
		swapped.Mappings = slices.Clone(m.Mappings)
		swapped.Mappings[0].ShardID, swapped.Mappings[1].ShardID = swapped.Mappings[1].ShardID, swapped.Mappings[0].ShardID
		if err := Current(&swapped, q); !errors.Is(err, ErrStale) {
			t.Fatalf("two points swapped between the shards (the counts unchanged): %v", err)
		}
	}
}
