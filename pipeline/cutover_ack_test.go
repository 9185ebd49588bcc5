package pipeline

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// A switch that committed though its acknowledgement was lost leaves the
// map holding the plan's cutover while the plan does not record it: the plan
// is current (a resume applies the switch again), and only after its fence
// step; a map that does not hold the whole switch is not taken for it.
func TestSwitchCommittedIsCurrent(t *testing.T) {
	lo := keyspace.IntK(0)
	m := func(host string, port int, st string) *shardmap.Map {
		return &shardmap.Map{
			Version:   3,
			Locations: []shardmap.Location{{ShardID: 1, Host: host, Port: port, Schema: "s1"}},
			Functions: []shardmap.Function{{ID: 1, Name: "emp", Type: shardmap.Range, KeyType: keyspace.IntKey}},
			Mappings:  []shardmap.Mapping{{FuncID: 1, Kind: shardmap.Range, Lower: &lo, ShardID: 1, Status: st}},
		}
	}
	ref := shardmap.Ref{FuncID: 1, Kind: shardmap.Range, Lower: &lo}
	p := plans.New("move", "")
	p.Source = plans.Endpoint{ShardID: 1, Host: "a", Port: 1, Schema: "s1"}
	p.Target = plans.Endpoint{ShardID: 1, Host: "d", Port: 4, Schema: "s1"}
	p.Cutover = []shardmap.Change{{Op: shardmap.OpMoveLocation, ShardID: 1, Host: "d", Port: 4}, {Op: shardmap.OpSetStatus, Ref: ref, Status: shardmap.Online}}
	interlock.RecordAgainst(m("a", 1, shardmap.Online), p)
	fenced, switched, half := m("a", 1, shardmap.Offline), m("d", 4, shardmap.Online), m("d", 4, shardmap.Offline)
	switched.Version, half.Version = 4, 4
	if interlock.SwitchCommitted(switched, p) {
		t.Error("a switch taken for committed before the fence step ended")
	}
	p.Step(plans.StepFence).State = plans.Done
	for _, c := range []struct {
		name string
		m    *shardmap.Map
		want bool
	}{{"fenced, not switched", fenced, false}, {"switched", switched, true}, {"half of the switch", half, false}} {
		if got := interlock.SwitchCommitted(c.m, p); got != c.want {
			t.Errorf("%s: SwitchCommitted %v, want %v", c.name, got, c.want)
		}
	}
	if err := interlock.Current(switched, p); err != nil {
		t.Errorf("a plan whose switch committed unacknowledged is refused as stale: %v", err)
	}
	if err := interlock.Current(half, p); err == nil {
		t.Error("a map with the shard moved but offline passed as the plan's own switch")
	}
}

func TestOutOfSpace(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1114, Message: "The table 'salaries' is full"}, true},
		{&mysql.MySQLError{Number: 1021, Message: "Disk full (/var/tmp/x); waiting for someone to free some space..."}, true},
		{&mysql.MySQLError{Number: 1030, Message: "Got error 28 \"No space left on device\" from storage engine InnoDB"}, true},
		{&mysql.MySQLError{Number: 1005, Message: "Can't create table `s`.`t` (errno: 135 \"No more room in record file\")"}, true},
		{&mysql.MySQLError{Number: 1005, Message: "Can't create table `s`.`t` (errno: 150 \"Foreign key constraint is incorrectly formed\")"}, false},
		{&mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, false},
	} {
		err := fmt.Errorf("copy s.t: %w", c.err)
		if got := outOfSpace(err); got != c.want {
			t.Errorf("outOfSpace(%v) = %v, want %v", err, got, c.want)
		}
		if c.want && (Transient(err) || !strings.Contains(hint(err, "p1"), "free space")) {
			t.Errorf("%v: transient %v, hint %q: want a deterministic failure saying what to free", err, Transient(err), hint(err, "p1"))
		}
	}
}
