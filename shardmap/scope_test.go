package shardmap

import (
	"testing"

	"github.com/shardctl/shardctl/keyspace"
)

// A merge's changes name the same LIST points twice (offline, then
// re-point and online): the scoped read asks for each point once. Asked
// twice, a set larger than one read's chunk came back with points in two
// chunks, as two mappings each, and the cutover's re-point refused with
// "-600 of the 800 list points" (TestKeyMoves/list-merge after a resume).
func TestScopeOfReadsEachPointOnce(t *testing.T) {
	var keys []keyspace.Key
	for k := 1; k <= 800; k++ {
		keys = append(keys, keyspace.IntK(int64(k)))
	}
	ref := Ref{FuncID: 1, Kind: List, Points: keys}
	sc, ok := scopeOf([]Change{
		{Op: OpSetStatus, Ref: ref, Status: Offline},
		{Op: OpRepoint, Ref: ref, ShardID: 2},
		{Op: OpSetStatus, Ref: ref, Status: Online},
	})
	if !ok {
		t.Fatal("scopeOf: a set of status changes and re-points needs the whole map")
	}
	if got := len(sc[1]); got != 800 {
		t.Fatalf("scopeOf asks for %d points, want each of the 800 once", got)
	}
}
