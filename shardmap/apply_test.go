package shardmap_test

import (
	"reflect"
	"testing"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/shardmap"
)

// A change is made to the map it validates against: an Apply reads the whole
// map once, under the version lock that every writer of the shard map waits
// on, however many changes it makes (at a thousand shards one read is two
// thousand rows, and a split's cutover used to read it three times while
// three other plans waited to take their shards offline). Each later change
// in the same Apply still sees the earlier ones: a range split and marked
// offline, re-pointed and merged, a location emptied and removed.
func TestApplyReadsTheMapOnce(t *testing.T) {
	s := newStore(t, "sm_apply_once")
	must[int](t)(s.AddFunction(ctx, "r", shardmap.Range, keyspace.IntKey))
	must[int](t)(s.AddFunction(ctx, "h", shardmap.Hash, keyspace.IntKey))
	var ids []int
	for i := 1; i <= 3; i++ {
		ids = append(ids, must[int](t)(s.AddShard(ctx, "127.0.0.1", 3306, "once_"+string(rune('0'+i)))))
	}
	check(t, s.AddRange(ctx, "r", "0", ids[0]))
	check(t, s.AddRange(ctx, "r", "1000", ids[1]))
	check(t, s.AddRange(ctx, "r", "2000", ids[2]))
	m := must[*shardmap.Map](t)(s.Load(ctx))
	rf, _ := m.Function("r")
	hf, _ := m.Function("h")
	key := func(n int64) *keyspace.Key { k := keyspace.IntK(n); return &k }
	rng := func(lo int64) shardmap.Ref { return shardmap.Ref{FuncID: rf.ID, Kind: shardmap.Range, Lower: key(lo)} }
	point := shardmap.Ref{FuncID: hf.ID, Kind: shardmap.Hash, Hash: "8000000000000000"}

	steps := []struct {
		name    string
		changes []shardmap.Change
	}{
		{"a split's offline changes", []shardmap.Change{
			{Op: shardmap.OpSplitRange, Ref: rng(0), At: key(500)},
			{Op: shardmap.OpSetStatus, Ref: rng(500), Status: shardmap.Offline}}},
		{"a split's cutover", []shardmap.Change{
			{Op: shardmap.OpRepoint, Ref: rng(500), ShardID: ids[1]},
			{Op: shardmap.OpSetStatus, Ref: rng(500), Status: shardmap.Online}}},
		{"back to the shard below, then merged into its range", []shardmap.Change{
			{Op: shardmap.OpRepoint, Ref: rng(500), ShardID: ids[0]},
			{Op: shardmap.OpMergeRange, Ref: rng(500)}}},
		{"a ring point added offline, then online", []shardmap.Change{
			{Op: shardmap.OpAddHashPoint, Ref: point, ShardID: ids[0], Status: shardmap.Offline},
			{Op: shardmap.OpSetStatus, Ref: point, Status: shardmap.Online}}},
		{"a location moved, emptied and removed", []shardmap.Change{
			{Op: shardmap.OpMoveLocation, ShardID: ids[2], Host: "127.0.0.2", Port: 3307},
			{Op: shardmap.OpRepoint, Ref: rng(2000), ShardID: ids[1]},
			{Op: shardmap.OpMergeRange, Ref: rng(2000)},
			{Op: shardmap.OpRemoveLocation, ShardID: ids[2]}}},
		{"a new location, and a point removed", []shardmap.Change{
			{Op: shardmap.OpAddLocation, Host: "127.0.0.1", Port: 3308, Schema: "once_new"},
			{Op: shardmap.OpRemoveMapping, Ref: point}}},
	}
	for _, st := range steps {
		before := s.Reads()
		check(t, s.Apply(ctx, st.name, st.changes))
		if n := s.Reads() - before; n != 1 {
			t.Errorf("%s: %d changes read the whole map %d times, want once", st.name, len(st.changes), n)
		}
	}
	got := must[*shardmap.Map](t)(s.Load(ctx))
	if len(got.Locations) != 3 || len(got.MappingsOf(rf.ID)) != 2 || len(got.MappingsOf(hf.ID)) != 0 {
		t.Fatalf("after the changes: %+v", got)
	}

	// The map the changes were made to is the map the tables now hold.
	rf2 := shardmap.Ref{FuncID: rf.ID, Kind: shardmap.Range, Lower: key(1500)}
	mem, fresh, err := s.ApplyInMemory(ctx, []shardmap.Change{
		{Op: shardmap.OpSplitRange, Ref: rng(1000), At: key(1500)},
		{Op: shardmap.OpSetStatus, Ref: rf2, Status: shardmap.Offline},
		{Op: shardmap.OpAddHashPoint, Ref: point, ShardID: ids[1], Status: shardmap.Online},
		{Op: shardmap.OpAddLocation, Host: "127.0.0.1", Port: 3309, Schema: "once_newer"},
		{Op: shardmap.OpMoveLocation, ShardID: ids[0], Host: "127.0.0.3", Port: 3310},
	})
	check(t, err)
	if !reflect.DeepEqual(mem.Locations, fresh.Locations) {
		t.Errorf("locations in memory:\n%+v\nin the tables:\n%+v", mem.Locations, fresh.Locations)
	}
	if !reflect.DeepEqual(mem.Mappings, fresh.Mappings) {
		t.Errorf("mappings in memory:\n%+v\nin the tables:\n%+v", mem.Mappings, fresh.Mappings)
	}
}

// A key move's changes read the LIST points they name, not the shard's
// every tenant: the offline change, the cutover and the lift of a backed-off
// attempt run inside the blackout, and a shard of 100,000 tenants made each
// read 100,000 rows under the version lock. A change that needs the whole
// map (removing a location asks whether any mapping still points at it)
// still reads it.
func TestApplyReadsOnlyTheMovingPoints(t *testing.T) {
	s := newStore(t, "sm_apply_points")
	fn := must[int](t)(s.AddFunction(ctx, "tenants", shardmap.List, keyspace.IntKey))
	a := must[int](t)(s.AddShard(ctx, "127.0.0.1", 3306, "points_a"))
	b := must[int](t)(s.AddShard(ctx, "127.0.0.1", 3307, "points_b"))
	const tenants = 20000
	// The tenants written in a few statements: registering them is not what is tested.
	for lo := 1; lo <= tenants; lo += 5000 {
		q := "INSERT INTO `sm_apply_points`.list_points (func_id, point, shard_id, status) VALUES "
		var args []any
		for k := lo; k < lo+5000; k++ {
			if k > lo {
				q += ", "
			}
			q += "(?, ?, ?, 'online')"
			args = append(args, fn, k, a)
		}
		if _, err := s.DB.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	moving := shardmap.Ref{FuncID: fn, Kind: shardmap.List, Points: []keyspace.Key{keyspace.IntK(11), keyspace.IntK(12), keyspace.IntK(13)}}
	offline := []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: moving, Status: shardmap.Offline}}
	cutover := []shardmap.Change{{Op: shardmap.OpRepoint, Ref: moving, ShardID: b}, {Op: shardmap.OpSetStatus, Ref: moving, Status: shardmap.Online}}
	for _, st := range []struct {
		name string
		run  func() error
	}{
		{"offline", func() error { return s.Apply(ctx, "offline", offline) }},
		{"lift", func() error {
			m, err := s.LoadFor(ctx, shardmap.OnlineAgain(offline))
			if err == nil {
				err = s.Apply(ctx, "online", m.Held(shardmap.OnlineAgain(offline)))
			}
			return err
		}},
		{"offline again", func() error { return s.Apply(ctx, "offline", offline) }},
		{"cutover", func() error { return s.Apply(ctx, "cut over", cutover) }},
		{"cutover again (a resume)", func() error { return s.Apply(ctx, "cut over", cutover) }},
	} {
		before, reads := s.PointsRead(), s.Reads()
		check(t, st.run())
		if n, r := s.PointsRead()-before, s.Reads()-reads; n > 3*r {
			t.Errorf("%s: %d reads of the map returned %d list points of the %d; want the 3 it changes each", st.name, r, n, tenants)
		}
	}
	m := must[*shardmap.Map](t)(s.Load(ctx))
	if got := len(m.ShardMappings(b)); got != 3 {
		t.Fatalf("shard %d has %d points after the cutover, want 3", b, got)
	}
	for _, mp := range m.ShardMappings(b) {
		if mp.Status != shardmap.Online {
			t.Errorf("point %s is %s after the cutover", mp.Point, mp.Status)
		}
	}
	before := s.PointsRead()
	err := s.Apply(ctx, "remove", []shardmap.Change{{Op: shardmap.OpRemoveLocation, ShardID: b}})
	if err == nil || s.PointsRead()-before < tenants {
		t.Fatalf("removing a location that still has points: %v after reading %d points; want refused after reading the whole map", err, s.PointsRead()-before)
	}
}
