package shardmap

import (
	"testing"

	"github.com/shardctl/shardctl/keyspace"
)

// A split's offline changes undone after taking them offline failed before
// the range was split: the new range's status change is dropped (it would
// fail with not-found), the existing ranges' kept.
func TestHeldDropsWhatWasNeverMade(t *testing.T) {
	lo, at := keyspace.IntK(0), keyspace.IntK(200)
	m := &Map{Mappings: []Mapping{{FuncID: 1, Kind: Range, Lower: &lo, ShardID: 1, Status: Online}}}
	offline := []Change{
		{Op: OpSplitRange, Ref: Ref{FuncID: 1}, At: &at},
		{Op: OpSetStatus, Ref: Ref{FuncID: 1, Kind: Range, Lower: &at}, Status: Offline},
		{Op: OpSetStatus, Ref: Ref{FuncID: 1, Kind: Range, Lower: &lo}, Status: Offline},
	}
	back := m.Held(OnlineAgain(offline))
	if len(back) != 1 || back[0].Ref.Lower.Compare(lo) != 0 || back[0].Status != Online {
		t.Fatalf("Held kept %+v, want the range at 0 put online alone", back)
	}
	m.Mappings = append(m.Mappings, Mapping{FuncID: 1, Kind: Range, Lower: &at, ShardID: 1, Status: Offline})
	if back := m.Held(OnlineAgain(offline)); len(back) != 2 {
		t.Fatalf("Held kept %+v, want both ranges once the split is in", back)
	}
}
