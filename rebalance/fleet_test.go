package rebalance

import (
	"math/rand"
	"runtime"
	"testing"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/shardstatus"
)

// The fleet rebalance reads gives each shard its position among its
// function's mappings, and orders each function's mappings once: at 2,000
// shards, ordering them again for every shard allocated about 700 MB (and
// at 1,000 it was most of a dry run's CPU).
func TestFleetOfOrdersEachFunctionOnce(t *testing.T) {
	const n = 2000
	m := &shardmap.Map{}
	var sts []shardstatus.Shard
	for i := 1; i <= n; i++ {
		lower := keyspace.IntK(int64(i) * 100)
		mp := shardmap.Mapping{FuncID: 1, Kind: shardmap.Range, Lower: &lower, ShardID: i, Status: shardmap.Online}
		m.Locations = append(m.Locations, shardmap.Location{ShardID: i, Host: "127.0.0.1", Port: 3306 + i%3})
		m.Mappings = append(m.Mappings, mp)
		sts = append(sts, shardstatus.Shard{ShardID: i, Server: "127.0.0.1:3306", Mappings: []shardmap.Mapping{mp}, Rows: int64(i)})
	}
	rand.New(rand.NewSource(1)).Shuffle(n, func(i, j int) { m.Mappings[i], m.Mappings[j] = m.Mappings[j], m.Mappings[i] })
	sts = append(sts, shardstatus.Shard{ShardID: n + 1, Server: "127.0.0.1:3307"}) // unmapped: no function, no position

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fleet, err := fleetOf(m, sts, map[int]string{7: "plan x"})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(fleet) != n+1 {
		t.Fatalf("%d shards, want %d", len(fleet), n+1)
	}
	for _, sh := range fleet[:n] {
		if sh.Func != 1 || sh.Kind != "RANGE" || sh.Order != sh.ID-1 || sh.Rows != int64(sh.ID) {
			t.Fatalf("shard %d: %+v, want function 1 RANGE at position %d", sh.ID, sh, sh.ID-1)
		}
	}
	if sh := fleet[n]; sh.Func != 0 || sh.Order != 0 {
		t.Errorf("an unmapped shard: %+v", sh)
	}
	if !fleet[6].Busy || fleet[6].BusyWith != "plan x" || fleet[5].Busy {
		t.Errorf("busy shards: %+v %+v", fleet[5], fleet[6])
	}
	if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; mb > 64 {
		t.Errorf("reading a fleet of %d shards allocated %d MB: the mappings are ordered once per shard, not once per function", n, mb)
	}
}
