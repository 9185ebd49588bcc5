// Package shardmap is the sharding database of the book (seed 001, Examples
// 7-4 and 7-6) with the mapping states of Azure's shard map manager (seed
// 003): locations, partition functions, sharded columns, range, hash and list
// mappings, each mapping online or offline, and a version counter bumped by
// every change so routers can validate their caches.
package shardmap

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/shardmap/mapdef"
)

// The value types plans carry live in mapdef (no database); these names keep
// shardmap's callers unchanged.
type (
	ShardingType = mapdef.ShardingType
	Ref          = mapdef.Ref
	Change       = mapdef.Change
)

const (
	Range = mapdef.Range
	Hash  = mapdef.Hash
	List  = mapdef.List

	Online  = mapdef.Online
	Offline = mapdef.Offline

	OpSetStatus      = mapdef.OpSetStatus
	OpRepoint        = mapdef.OpRepoint
	OpSplitRange     = mapdef.OpSplitRange
	OpMergeRange     = mapdef.OpMergeRange
	OpAddHashPoint   = mapdef.OpAddHashPoint
	OpRemoveMapping  = mapdef.OpRemoveMapping
	OpMoveLocation   = mapdef.OpMoveLocation
	OpRemoveLocation = mapdef.OpRemoveLocation
	OpAddLocation    = mapdef.OpAddLocation
	OpSetPolicy      = mapdef.OpSetPolicy

	PolicyDedicated = mapdef.PolicyDedicated
	PolicyShared    = mapdef.PolicyShared
	Format          = mapdef.Format

	NewShard = mapdef.NewShard
)

// Render prints a statement with its arguments inlined, for people to read.
func Render(query string, args []any) string { return mapdef.Render(query, args) }

// Errors callers test with errors.Is. ErrBadInput marks every refusal of operator input.
var (
	ErrBadInput  = errors.New("bad input")
	ErrNotFound  = errors.New("not found")
	ErrOffline   = errors.New("mapping offline")
	ErrNoMapping = errors.New("no mapping for key")
)

func badInput(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadInput, fmt.Sprintf(format, a...))
}

// Location is where a shard lives: one schema on one server.
type Location struct {
	ShardID int    `json:"shard_id"`
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Schema  string `json:"schema"`
}

// Addr is the location's server.
func (l Location) Addr() dbutil.Addr { return dbutil.Addr{Host: l.Host, Port: l.Port} }

// Function is a partition function.
type Function struct {
	ID      int              `json:"func_id"`
	Name    string           `json:"name"`
	Type    ShardingType     `json:"sharding_type"`
	KeyType keyspace.KeyType `json:"key_type"`
}

// Column says table is sharded on column by function FuncID.
type Column struct {
	Table  string `json:"table"`
	Column string `json:"column"`
	FuncID int    `json:"func_id"`
}

// Mapping is one row of ranges, hashes or list_points.
type Mapping struct {
	FuncID  int           `json:"func_id"`
	Kind    ShardingType  `json:"kind"`
	Lower   *keyspace.Key `json:"lower,omitempty"` // RANGE: inclusive lower bound
	Upper   *keyspace.Key `json:"upper,omitempty"` // RANGE: exclusive upper bound (next mapping's lower), nil = unbounded
	Hash    string        `json:"hash,omitempty"`  // HASH: ring point
	Point   *keyspace.Key `json:"point,omitempty"` // LIST: the key
	ShardID int           `json:"shard_id"`
	Status  string        `json:"status"`
	// MovedAt is when a LIST point was last re-pointed by a key move or a
	// merge (nil: never since the map's format 2, or not a LIST point).
	MovedAt *time.Time `json:"moved_at,omitempty"`
}

// ShardPolicy is how rebalance treats a shard (table shard_policies).
type ShardPolicy struct {
	ShardID   int  `json:"shard_id"`
	Dedicated bool `json:"dedicated"` // never a source or a destination of rebalance's key moves
}

// Ref returns the mapping's identity.
func (m Mapping) Ref() Ref {
	return Ref{FuncID: m.FuncID, Kind: m.Kind, Lower: m.Lower, Hash: m.Hash, Point: m.Point}
}

// String renders the mapping's key space: a range, a ring point or a list key.
func (m Mapping) String() string {
	switch m.Kind {
	case Range:
		return keyspace.Range{Lo: m.Lower, Hi: m.Upper}.String()
	case Hash:
		return "point " + m.Hash
	}
	if m.Point != nil {
		return "key " + m.Point.String()
	}
	return "?"
}

// Map is a consistent snapshot of the whole shard map.
type Map struct {
	Version int64 `json:"version"`
	// Format is the table layout the map was read in (mapdef.Format).
	Format    int        `json:"format"`
	Locations []Location `json:"locations"`
	Functions []Function `json:"functions"`
	Columns   []Column   `json:"columns"`
	Mappings  []Mapping  `json:"mappings"`
	// Policies are the shards with a policy set (shardctl shardmap set-policy).
	Policies []ShardPolicy `json:"policies,omitempty"`
}

// Dedicated reports whether shard id is marked dedicated.
func (m *Map) Dedicated(id int) bool {
	for _, p := range m.Policies {
		if p.ShardID == id {
			return p.Dedicated
		}
	}
	return false
}

// Location returns shard id's location.
func (m *Map) Location(id int) (Location, error) {
	for _, l := range m.Locations {
		if l.ShardID == id {
			return l, nil
		}
	}
	return Location{}, fmt.Errorf("%w: shard %d is not in the shard map (see 'shardctl shardmap show')", ErrNotFound, id)
}

// Function finds a function by name, or by number when name is all digits.
func (m *Map) Function(name string) (Function, error) {
	for _, f := range m.Functions {
		if f.Name == name || fmt.Sprint(f.ID) == name {
			return f, nil
		}
	}
	return Function{}, fmt.Errorf("%w: partition function %q is not in the shard map (see 'shardctl shardmap show')", ErrNotFound, name)
}

// FunctionByID finds a function by id.
func (m *Map) FunctionByID(id int) (Function, error) {
	for _, f := range m.Functions {
		if f.ID == id {
			return f, nil
		}
	}
	return Function{}, fmt.Errorf("%w: partition function %d is not in the shard map", ErrNotFound, id)
}

// TableFunction returns the function and column a table is sharded by; ok is false for a global table.
func (m *Map) TableFunction(table string) (Function, Column, bool) {
	for _, c := range m.Columns {
		if c.Table == table {
			f, err := m.FunctionByID(c.FuncID)
			return f, c, err == nil
		}
	}
	return Function{}, Column{}, false
}

// MappingsOf returns the mappings of function funcID, ordered by key (ranges by lower bound, hashes by point).
func (m *Map) MappingsOf(funcID int) []Mapping {
	var out []Mapping
	for _, mp := range m.Mappings {
		if mp.FuncID == funcID {
			out = append(out, mp)
		}
	}
	sortMappings(out)
	return out
}

// ShardMappings returns every mapping that points at shard id.
func (m *Map) ShardMappings(id int) []Mapping {
	var out []Mapping
	for _, mp := range m.Mappings {
		if mp.ShardID == id {
			out = append(out, mp)
		}
	}
	sortMappings(out)
	return out
}

func sortMappings(ms []Mapping) {
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.FuncID != b.FuncID {
			return a.FuncID < b.FuncID
		}
		switch {
		case a.Lower != nil && b.Lower != nil:
			return a.Lower.Compare(*b.Lower) < 0
		case a.Point != nil && b.Point != nil:
			return a.Point.Compare(*b.Point) < 0
		}
		return a.Hash < b.Hash
	})
}

// Resolution is where a key lives.
type Resolution struct {
	Function Function `json:"function"`
	Key      string   `json:"key"`
	Hash     string   `json:"hash,omitempty"`
	Mapping  Mapping  `json:"mapping"`
	Location Location `json:"location"`
}

// Lookup resolves key (in text form) under function f. It follows the book's
// queries exactly: RANGE takes the mapping with the greatest lower bound <= key;
// HASH the point with the greatest hash < MD5(key), else the greatest point.
// An offline mapping is still returned; callers decide (routers return ErrOffline).
func (m *Map) Lookup(f Function, key string) (Resolution, error) {
	res := Resolution{Function: f, Key: key}
	// One pass over the mappings in the map's own order, no sorted copy: a
	// router looks a key up for every statement, and sorting a fleet's
	// thousands of mappings each time cost more than the rest of the lookup.
	var found *Mapping
	switch f.Type {
	case Range, List:
		k, err := keyspace.ParseKey(key, f.KeyType)
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		for i := range m.Mappings {
			mp := &m.Mappings[i]
			if mp.FuncID != f.ID {
				continue
			}
			if f.Type == Range && mp.Lower.Compare(k) <= 0 && (found == nil || mp.Lower.Compare(*found.Lower) >= 0) {
				found = mp // the greatest lower bound <= key so far
			}
			if f.Type == List && mp.Point.Compare(k) == 0 {
				found = mp
			}
		}
	case Hash:
		h, _ := keyspace.HashOf(key)
		res.Hash = h
		var at []int
		var points []string
		for i, mp := range m.Mappings {
			if mp.FuncID == f.ID {
				at, points = append(at, i), append(points, mp.Hash)
			}
		}
		if i := keyspace.Owner(points, h); i >= 0 {
			found = &m.Mappings[at[i]]
		}
	}
	if found == nil {
		return res, fmt.Errorf("%w: function %s has no mapping for key %q", ErrNoMapping, f.Name, key)
	}
	res.Mapping = *found
	loc, err := m.Location(found.ShardID)
	if err != nil {
		return res, err
	}
	res.Location = loc
	return res, nil
}

// Owned returns, for function f, the filter selecting the keys shard id owns
// on column col: its ranges, ring arcs or list points. Empty when it owns none.
func (m *Map) Owned(f Function, shardID int, col string) keyspace.Filter {
	flt := keyspace.Filter{Column: col}
	ms := m.MappingsOf(f.ID)
	var points []string
	for _, mp := range ms {
		if mp.Kind == Hash {
			points = append(points, mp.Hash)
		}
	}
	for _, mp := range ms {
		if mp.ShardID != shardID {
			continue
		}
		switch mp.Kind {
		case Range:
			flt.Ranges = append(flt.Ranges, keyspace.Range{Lo: mp.Lower, Hi: mp.Upper})
		case Hash:
			flt.Arcs = append(flt.Arcs, keyspace.ArcOf(points, mp.Hash))
		case List:
			flt.Points = append(flt.Points, *mp.Point)
		}
	}
	return flt
}

// fillUppers sets each range mapping's Upper to the next lower bound of the same function.
func (m *Map) fillUppers() {
	sortMappings(m.Mappings)
	for i := range m.Mappings {
		mp := &m.Mappings[i]
		if mp.Kind != Range {
			continue
		}
		mp.Upper = nil
		for j := i + 1; j < len(m.Mappings); j++ {
			nx := m.Mappings[j]
			if nx.FuncID == mp.FuncID && nx.Kind == Range {
				mp.Upper = nx.Lower
				break
			}
		}
	}
}

// Summary renders a shard's mappings for a one-line view: ranges and ring
// points each, LIST points as runs of consecutive keys ("keys 1-4000"), at
// most a few runs before a count, so a shard of thousands of tenants stays
// one readable line.
func Summary(ms []Mapping) string {
	var parts []string
	var keys []keyspace.Key
	for _, mp := range ms {
		if mp.Kind != List || mp.Point == nil {
			parts = append(parts, mp.String())
			continue
		}
		keys = append(keys, *mp.Point)
	}
	if len(keys) > 0 {
		parts = append(parts, "keys "+keyspace.Runs(keys, 4))
	}
	return strings.Join(parts, " ")
}

// GroupByShard splits mappings (in key order) by shard and status, each
// group in key order, the groups by shard then status: what one Summary
// line each describes.
func GroupByShard(ms []Mapping) [][]Mapping {
	type at struct {
		shard  int
		status string
	}
	idx := map[at]int{}
	var out [][]Mapping
	for _, mp := range ms {
		k := at{mp.ShardID, mp.Status}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], mp)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i][0].ShardID != out[j][0].ShardID {
			return out[i][0].ShardID < out[j][0].ShardID
		}
		return out[i][0].Status < out[j][0].Status
	})
	return out
}

// OnlineAgain turns "mark offline" changes into "mark online" ones.
func OnlineAgain(cs []Change) []Change {
	var out []Change
	for _, c := range cs {
		if c.Op == OpSetStatus && c.Status == Offline {
			c.Status = Online
			out = append(out, c)
		}
	}
	return out
}

// Held keeps the changes of cs whose mapping m holds (a set of LIST points is
// kept as it is): a mapping that an interrupted change never made, such as
// a split's new range when taking it offline failed, is not offline and has
// nothing to put back online.
func (m *Map) Held(cs []Change) []Change {
	var out []Change
	for _, c := range cs {
		if len(c.Ref.Points) == 0 {
			if _, ok := find(m, c.Ref); !ok {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}
