package checks

import (
	"testing"

	"github.com/shardctl/shardctl/internal/mapfixture"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
)

// A plan is compared with the shard map at apply and resume, not while it
// is made: a shard moved since is refused then (checkCurrent's cases:
// TestCheckCurrent).
func TestCheckPlanIsCurrent(t *testing.T) {
	p := plans.New("move", "")
	p.Source = plans.Endpoint{ShardID: 1, Host: "a", Port: 1, Schema: "s1"}
	p.Target = plans.Endpoint{ShardID: 1, Host: "d", Port: 4, Schema: "s1"}
	interlock.RecordAgainst(mapfixture.TwoRanges(), p)
	moved := mapfixture.TwoRanges()
	moved.Locations[0].Host, moved.Locations[0].Port = "d", 4
	if err := runCheck(t, "plan is current", &CheckEnv{Plan: p, Map: moved, Planning: true}); err != nil {
		t.Fatalf("while planning: %v", err)
	}
	if err := runCheck(t, "plan is current", &CheckEnv{Plan: p, Map: mapfixture.TwoRanges()}); err != nil {
		t.Fatalf("a current plan: %v", err)
	}
	checktest.WantRefused(t, runCheck(t, "plan is current", &CheckEnv{Plan: p, Map: moved}), "now lives at d:4/s1")
}
