package pipeline

import (
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/mapfixture"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// A stopped move of shard 1 (a:1/s1) to c:3/s1 owns shard 1, its mappings
// and both locations; edits elsewhere pass.
func TestCheckMapEdit(t *testing.T) {
	m := mapfixture.TwoRanges()
	m.Locations = append(m.Locations, shardmap.Location{ShardID: 4, Host: "c", Port: 3, Schema: "s1"}) // registered by hand at the target copy
	p := plans.New("move", "move shard 1")
	p.State = plans.StateStopped
	p.Source = plans.Endpoint{ShardID: 1, Host: "a", Port: 1, Schema: "s1"}
	p.Target = plans.Endpoint{ShardID: 1, Host: "c", Port: 3, Schema: "s1"}
	target, other := p.Target, plans.Endpoint{Host: "c", Port: 3, Schema: "s9"}
	target.ShardID = 0
	cases := []struct {
		name string
		e    MapEdit
		want string // what the refusal names; "" passes
	}{
		{"add-shard at the target copy", MapEdit{Command: "add-shard", At: &target}, "its target copy"},
		{"add-shard at the source, host in capitals", MapEdit{Command: "add-shard", At: &plans.Endpoint{Host: "A", Port: 1, Schema: "s1"}}, "its source"},
		{"add-shard elsewhere", MapEdit{Command: "add-shard", At: &other}, ""},
		{"set-status of the plan's shard", MapEdit{Command: "set-status", Shards: []int{1}}, "shard 1"},
		{"set-status of another shard", MapEdit{Command: "set-status", Shards: []int{2}}, ""},
		{"set-status of a location at the target copy", MapEdit{Command: "set-status", Shards: []int{4}}, "shard 4, located at c:3/s1 (its target copy)"},
		{"remove that location", MapEdit{Command: "remove-shard", Shards: []int{4}, Removes: true}, ""},
		{"remove the plan's shard", MapEdit{Command: "remove-shard", Shards: []int{1}, Removes: true}, "shard 1"},
		{"add-range taking keys from the plan's shard", MapEdit{Command: "add-range", Shards: []int{2}, Function: "emp", Key: "500"}, "shard 1"},
		{"add-range below every range", MapEdit{Command: "add-range", Shards: []int{2}, Function: "emp", Key: "-100"}, ""},
		{"add-range to the plan's shard", MapEdit{Command: "add-range", Shards: []int{1}, Function: "emp", Key: "-100"}, "shard 1"},
		{"add-column of the plan's function", MapEdit{Command: "add-column", Function: "emp", AllOfFunction: true}, "shard 1"},
		{"add-column of an unknown function", MapEdit{Command: "add-column", Function: "nope", AllOfFunction: true}, ""},
		{"import into the plan's shard names the line", MapEdit{Command: "import", Shards: []int{1, 2}, Lines: map[int]string{1: "line 17 (key 42 -> shard 1)", 2: "line 3 (key 7 -> shard 2)"}}, "shard 1 (line 17 (key 42 -> shard 1))"},
		{"import elsewhere", MapEdit{Command: "import", Shards: []int{2}, Lines: map[int]string{2: "line 3 (key 7 -> shard 2)"}}, ""},
	}
	for _, c := range cases {
		_, got, what := checkMapEdit(m, []*plans.Plan{p}, c.e)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("%s: refused (%s)", c.name, what)
		case c.want != "" && got == nil:
			t.Errorf("%s: passed", c.name)
		case c.want != "" && !strings.Contains(what, c.want):
			t.Errorf("%s: names %q, want %q", c.name, what, c.want)
		}
	}
	// A plan that has not run, or has ended, owns nothing.
	for _, st := range []string{plans.StateNew, plans.StateDone, plans.StateAborted} {
		p.State = st
		if _, got, _ := checkMapEdit(m, []*plans.Plan{p}, MapEdit{Command: "set-status", Shards: []int{1}}); got != nil {
			t.Errorf("a plan in state %s owns shard 1", st)
		}
	}
	// The refusal names the plan and the commands that end it.
	p.State = plans.StateStopped
	err := mapEditRefusal(MapEdit{Command: "set-status"}, p, "shard 1", false)
	for _, s := range []string{"plan resume " + p.ID, "plan abort " + p.ID, "nothing was changed"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal does not say %q: %v", s, err)
		}
	}
}
