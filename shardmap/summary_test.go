package shardmap

import (
	"testing"

	"github.com/shardctl/shardctl/keyspace"
)

// A shard of thousands of tenants is one short line: runs of consecutive
// keys, a few runs, then the count.
func TestSummary(t *testing.T) {
	var ms []Mapping
	for _, k := range []int64{1, 2, 3, 4, 7, 9, 10, 20, 30, 40} {
		p := keyspace.IntK(k)
		ms = append(ms, Mapping{Kind: List, Point: &p})
	}
	if got, want := Summary(ms), "keys 1-4,7,9-10,20,… (10 keys)"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	if got, want := Summary(ms[:1]), "keys 1"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	lo, hi := keyspace.IntK(0), keyspace.IntK(100)
	if got, want := Summary([]Mapping{{Kind: Range, Lower: &lo, Upper: &hi}}), "[0, 100)"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}
