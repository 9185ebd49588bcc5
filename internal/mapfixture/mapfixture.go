// Package mapfixture holds the small shard maps that the fast tests of the
// pipeline's rooms (interlock, checks, map edits) share, so each reads the
// same fleet.
package mapfixture

import (
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/shardmap"
)

func k(v int64) *keyspace.Key { x := keyspace.IntK(v); return &x }

// TwoRanges is a map of one RANGE function: shard 1 [0, 1000) at a:1/s1, shard 2 [1000, +inf) at b:2/s2, shard 3 unmapped at c:3/s3.
func TwoRanges() *shardmap.Map {
	return &shardmap.Map{
		Version:   7,
		Locations: []shardmap.Location{{ShardID: 1, Host: "a", Port: 1, Schema: "s1"}, {ShardID: 2, Host: "b", Port: 2, Schema: "s2"}, {ShardID: 3, Host: "c", Port: 3, Schema: "s3"}},
		Functions: []shardmap.Function{{ID: 1, Name: "emp", Type: shardmap.Range, KeyType: keyspace.IntKey}},
		Columns:   []shardmap.Column{{Table: "employees", Column: "emp_no", FuncID: 1}},
		Mappings: []shardmap.Mapping{
			{FuncID: 1, Kind: shardmap.Range, Lower: k(0), Upper: k(1000), ShardID: 1, Status: shardmap.Online},
			{FuncID: 1, Kind: shardmap.Range, Lower: k(1000), ShardID: 2, Status: shardmap.Online},
		},
	}
}
