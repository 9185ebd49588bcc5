package pipeline

import (
	"errors"
	"testing"

	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// The shard map, not the plan, decides which side a repair reads from; a
// copy at a shard's location is never a repair's target.
func TestRepairSidesFollowTheShardMap(t *testing.T) {
	m := &shardmap.Map{Locations: []shardmap.Location{{ShardID: 3, Host: "db4", Port: 3306, Schema: "shard_3"}}}
	src := plans.Endpoint{ShardID: 3, Host: "db1", Port: 3306, Schema: "shard_3"}
	dst := plans.Endpoint{ShardID: 3, Host: "db4", Port: 3306, Schema: "shard_3"}
	p := &plans.Plan{Source: src, Target: dst}
	for _, st := range plans.Steps {
		p.Steps = append(p.Steps, plans.StepRecord{Name: st, State: plans.Pending})
	}
	if Serving(p) != plans.SideSource {
		t.Fatal("before cutover the source serves")
	}
	if err := CheckServing(m, src); !errors.Is(err, ErrRefused) {
		t.Fatalf("the map points at db4, the plan says db1 serves: %v", err)
	}
	p.Step(plans.StepCutover).State = plans.Done
	if Serving(p) != plans.SideTarget || CheckServing(m, dst) != nil {
		t.Fatal("after cutover the target serves, as the map says")
	}
	if err := CheckRepairable(m, dst); !errors.Is(err, ErrLive) {
		t.Fatalf("a shard's location as the copy: %v", err)
	}
	if err := CheckRepairable(m, src); err != nil {
		t.Fatalf("a copy no shard is located at: %v", err)
	}
}
