package pipeline

import (
	"strings"
	"testing"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

// The undo advice of a plan that cut over is a command with the plan's own
// keys, never a template (issue 53): a LIST merge splits its keys back out
// (runs for consecutive keys), keys moved into a neighbour move back by
// name, a LIST key set on a new shard merges back, moved ranges move back
// with --range or --keys. The e2e test TestAdviceRuns runs them.
func TestUndoAdviceIsACommand(t *testing.T) {
	pts := func(vs ...int64) []keyspace.Key {
		var ks []keyspace.Key
		for _, v := range vs {
			ks = append(ks, keyspace.IntK(v))
		}
		return ks
	}
	rng := func(lo, hi int64) keyspace.Range {
		l, h := keyspace.IntK(lo), keyspace.IntK(hi)
		return keyspace.Range{Lo: &l, Hi: &h}
	}
	mk := func(op string, args map[string]string, f keyspace.Filter) *plans.Plan {
		p := plans.New(op, "")
		p.ID, p.State, p.Args = "P", plans.StateDone, args
		p.Source = plans.Endpoint{ShardID: 2, Host: "10.0.0.2", Port: 3306, Schema: "s2"}
		p.Target = plans.Endpoint{ShardID: 1, Host: "10.0.0.1", Port: 3306, Schema: "s1"}
		f.Column = "k"
		p.Copy = []tables.Table{{Name: "g"}, {Name: "t", Sharded: true, ShardColumn: "k", Filter: f}}
		return p
	}
	for _, c := range []struct {
		name string
		p    *plans.Plan
		want string
	}{
		{"list merge", mk(operation.Merge, nil, keyspace.Filter{Points: pts(100, 101, 102, 103, 200)}),
			"shardctl split --shard 1 --keys 100..103,200 --to 10.0.0.2:3306 --schema s2"},
		{"list keys into", mk(operation.MoveKeys, map[string]string{"keys": "keys 7,9"}, keyspace.Filter{Points: pts(7, 9)}),
			"shardctl move --shard 1 --keys 7,9 --into 2"},
		{"list keys to a new shard", mk(operation.Split, map[string]string{"keys": "keys 7"}, keyspace.Filter{Points: pts(7)}),
			"shardctl merge --shard 1 --into 2"},
		{"range keys", mk(operation.MoveKeys, map[string]string{"keys": "keys [250, 320)"}, keyspace.Filter{Ranges: []keyspace.Range{rng(250, 320)}}),
			"shardctl move --shard 1 --range 250:320 --into 2"},
		{"int keys of a range map", mk(operation.MoveKeys, map[string]string{"keys": "keys [5, 6) [8, 11)"}, keyspace.Filter{Ranges: []keyspace.Range{rng(5, 6), rng(8, 11)}}),
			"shardctl move --shard 1 --keys 5,8..10 --into 2"},
	} {
		got := undoAdvice(c.p)
		if !strings.HasSuffix(got, ": "+c.want) || strings.Contains(got, "(--keys") {
			t.Errorf("%s: %s\nwant it to end in the command %s", c.name, got, c.want)
		}
	}
	// A range merge names its boundary and the shard's old schema.
	p := mk(operation.Merge, nil, keyspace.Filter{Ranges: []keyspace.Range{rng(0, 10)}})
	at := keyspace.IntK(10)
	p.Cutover = []shardmap.Change{{Op: shardmap.OpMergeRange, Ref: shardmap.Ref{Lower: &at}}}
	if got := undoAdvice(p); !strings.HasSuffix(got, "shardctl split --shard 1 --at 10 --to 10.0.0.2:3306 --schema s2") {
		t.Errorf("range merge: %s", got)
	}
}
