package pipeline

import (
	"testing"

	"github.com/shardctl/shardctl/plans"
)

// The pipeline's step list runs every step a plan can hold, in the plan's order.
func TestStepListMatchesPlans(t *testing.T) {
	var names []string
	for _, s := range steps {
		if s.name != plans.StepWindow {
			names = append(names, s.name)
		}
	}
	if len(names) != len(plans.Steps) {
		t.Fatalf("pipeline steps %v, plan steps %v", names, plans.Steps)
	}
	for i := range names {
		if names[i] != plans.Steps[i] {
			t.Fatalf("pipeline steps %v, plan steps %v", names, plans.Steps)
		}
	}
	r := &runner{}
	for _, n := range append(plans.Steps, plans.StepWindow) {
		if r.step(n) == nil {
			t.Errorf("no method runs step %s", n)
		}
	}
	if r.step("nonsense") != nil {
		t.Error("an unknown step has a method")
	}
}
