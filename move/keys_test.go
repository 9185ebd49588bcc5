package move

import (
	"strings"
	"testing"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/shardmap"
)

func rangeMap(bounds ...int64) *shardmap.Map {
	m := &shardmap.Map{Functions: []shardmap.Function{{ID: 1, Name: "f", Type: shardmap.Range, KeyType: keyspace.IntKey}}}
	for i, b := range bounds {
		lo := keyspace.IntK(b)
		mp := shardmap.Mapping{FuncID: 1, Kind: shardmap.Range, Lower: &lo, ShardID: i + 1, Status: shardmap.Online}
		if i+1 < len(bounds) {
			hi := keyspace.IntK(bounds[i+1])
			mp.Upper = &hi
		}
		m.Mappings = append(m.Mappings, mp)
	}
	return m
}

func describe(cs []shardmap.Change) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Describe())
	}
	return strings.Join(s, "; ")
}

// The shard-map changes of a RANGE key move: split out, offline; re-point,
// online, merged with the destination's neighbouring range; an abort merges
// back only the bounds it split at.
func TestRangeKeysChanges(t *testing.T) {
	m := rangeMap(0, 1000, 2000)
	f, _ := m.FunctionByID(1)
	for _, tc := range []struct {
		name                    string
		req                     KeysRequest
		dest                    int
		offline, cutover, abort string
	}{
		{"inside, into a shard far away", KeysRequest{ShardID: 1, Range: "250:320"}, 3,
			"split the range of function 1 at 250; split the range of function 1 at 320; mark range of function 1 from 250 offline",
			"re-point range of function 1 from 250 to shard 3; mark range of function 1 from 250 online",
			"mark range of function 1 from 250 online; merge range of function 1 from 320 into the range below it; merge range of function 1 from 250 into the range below it"},
		{"the top of shard 1 into shard 2 above it", KeysRequest{ShardID: 1, Range: "900:1000"}, 2,
			"split the range of function 1 at 900; mark range of function 1 from 900 offline",
			"re-point range of function 1 from 900 to shard 2; mark range of function 1 from 900 online; merge range of function 1 from 1000 into the range below it",
			"mark range of function 1 from 900 online; merge range of function 1 from 900 into the range below it"},
		{"the bottom of shard 2 into shard 1 below it", KeysRequest{ShardID: 2, Keys: []string{"1000", "1001"}}, 1,
			"split the range of function 1 at 1002; mark range of function 1 from 1000 offline",
			"re-point range of function 1 from 1000 to shard 1; mark range of function 1 from 1000 online; merge range of function 1 from 1000 into the range below it",
			"mark range of function 1 from 1000 online; merge range of function 1 from 1002 into the range below it"},
		{"to a new shard", KeysRequest{ShardID: 1, Keys: []string{"7"}}, shardmap.NewShard,
			"split the range of function 1 at 7; split the range of function 1 at 8; mark range of function 1 from 7 offline",
			"re-point range of function 1 from 7 to shard -1; mark range of function 1 from 7 online",
			"mark range of function 1 from 7 online; merge range of function 1 from 8 into the range below it; merge range of function 1 from 7 into the range below it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mv, err := rangeKeys(m, f, tc.req, tc.dest)
			if err != nil {
				t.Fatal(err)
			}
			for _, got := range []struct{ name, got, want string }{{"offline", describe(mv.offline), tc.offline}, {"cutover", describe(mv.cutover), tc.cutover}, {"abort", describe(mv.abort), tc.abort}} {
				if got.got != got.want {
					t.Errorf("%s:\n got  %s\n want %s", got.name, got.got, got.want)
				}
			}
		})
	}
	for _, bad := range []struct {
		req  KeysRequest
		want string
	}{
		{KeysRequest{ShardID: 1, Range: "900:1100"}, "not inside one of shard 1's ranges"},
		{KeysRequest{ShardID: 2, Range: "250:320"}, "not inside one of shard 2's ranges"},
		{KeysRequest{ShardID: 1, Range: "320:250"}, "LO must be below HI"},
		{KeysRequest{ShardID: 1, Range: "5"}, "give LO:HI"},
		{KeysRequest{ShardID: 1, Keys: []string{"9223372036854775807"}}, "largest INT key"},
	} {
		if _, err := rangeKeys(m, f, bad.req, 3); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want %q", bad.req, err, bad.want)
		}
	}
}
