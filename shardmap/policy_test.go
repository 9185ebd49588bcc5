package shardmap_test

import (
	"testing"
	"time"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/shardmap"
)

// A map of format 1 (no shard_policies, no list_points.moved_at, as an
// older shardctl created it) is read as it is, then upgraded in place
// (twice: idempotent); set-policy marks a shard dedicated with one version
// bump (and again changes nothing); re-pointing LIST points stamps when
// they moved; removing a location takes its policy with it.
func TestPoliciesUpgradeAndMovedAt(t *testing.T) {
	s := newStore(t, "sm_policy")
	db := s.DB
	// Back to format 1, as an older shardctl left it.
	for _, q := range []string{"DROP TABLE sm_policy.shard_policies", "ALTER TABLE sm_policy.list_points DROP COLUMN moved_at", "UPDATE sm_policy.version SET format = 1"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	a := must[int](t)(s.AddShard(ctx, "127.0.0.1", 3306, "a"))
	b := must[int](t)(s.AddShard(ctx, "127.0.0.1", 3307, "b"))
	must[int](t)(s.AddFunction(ctx, "tenants", shardmap.List, keyspace.IntKey))
	check(t, s.AddPoints(ctx, "tenants", []string{"1", "2", "3"}, a))
	m := must[*shardmap.Map](t)(s.Load(ctx))
	if m.Format != 1 || len(m.Policies) != 0 || m.Dedicated(a) {
		t.Fatalf("format 1 map: format %d, policies %v", m.Format, m.Policies)
	}
	check(t, s.Upgrade(ctx))
	check(t, s.Upgrade(ctx))
	v0 := must[int64](t)(s.Version(ctx))
	if changed := must[bool](t)(s.SetPolicy(ctx, b, true)); !changed {
		t.Fatal("set-policy changed nothing")
	}
	if changed := must[bool](t)(s.SetPolicy(ctx, b, true)); changed {
		t.Fatal("set-policy again changed something")
	}
	m = must[*shardmap.Map](t)(s.Load(ctx))
	if m.Format != shardmap.Format || !m.Dedicated(b) || m.Dedicated(a) || m.Version != v0+1 {
		t.Fatalf("after set-policy: format %d, policies %v, version %d (was %d)", m.Format, m.Policies, m.Version, v0)
	}
	if _, err := s.SetPolicy(ctx, 999, true); err == nil {
		t.Fatal("set-policy of an unknown shard accepted")
	}
	before := time.Now().UTC().Add(-time.Minute)
	f := must[shardmap.Function](t)(m.Function("tenants"))
	ref := shardmap.Ref{FuncID: f.ID, Kind: shardmap.List, Points: []keyspace.Key{keyspace.IntK(2), keyspace.IntK(3)}}
	check(t, s.Apply(ctx, "move keys", []shardmap.Change{{Op: shardmap.OpRepoint, Ref: ref, ShardID: b}}))
	m = must[*shardmap.Map](t)(s.Load(ctx))
	for _, mp := range m.MappingsOf(f.ID) {
		moved := mp.Point.Int != 1
		if (mp.MovedAt != nil) != moved || moved && (mp.MovedAt.Before(before) || mp.MovedAt.After(time.Now().UTC().Add(time.Minute))) {
			t.Errorf("key %s: moved_at %v", mp.Point, mp.MovedAt)
		}
	}
	// A plan's cutover marks its new shard as one change among the others.
	check(t, s.Apply(ctx, "cutover", []shardmap.Change{{Op: shardmap.OpSetPolicy, ShardID: a, Policy: shardmap.PolicyDedicated}}))
	check(t, s.Apply(ctx, "back", []shardmap.Change{{Op: shardmap.OpRepoint, Ref: shardmap.Ref{FuncID: f.ID, Kind: shardmap.List, Points: []keyspace.Key{keyspace.IntK(1)}}, ShardID: b}}))
	check(t, s.Apply(ctx, "remove", []shardmap.Change{{Op: shardmap.OpRemoveLocation, ShardID: a}}))
	m = must[*shardmap.Map](t)(s.Load(ctx))
	if len(m.Policies) != 1 || m.Policies[0].ShardID != b {
		t.Fatalf("policies after shard %d's location went: %v", a, m.Policies)
	}
}
