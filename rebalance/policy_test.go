package rebalance

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func ops(os []Op) string {
	var b []string
	for _, o := range os {
		switch o.Kind {
		case Merge:
			b = append(b, fmt.Sprintf("merge %d->%d", o.Shard, o.Into))
		default:
			b = append(b, fmt.Sprintf("%s %d %s->%s", o.Kind, o.Shard, o.From, o.To))
		}
	}
	return strings.Join(b, ", ")
}

func rng(id int, server string, order int, rows int64) Shard {
	return Shard{ID: id, Server: server, Func: 1, Kind: "RANGE", Order: order, Rows: rows, Bytes: rows * 100}
}

func TestProposeSplitMergeMove(t *testing.T) {
	fleet := []Shard{
		rng(1, "a", 0, 9000),
		rng(2, "b", 1, 900),
		rng(3, "b", 2, 900),
		rng(4, "a", 3, 2700),
		rng(5, "a", 4, 2700),
	}
	p := Policy{MaxShardRows: 6000, MinShardRows: 2000, MaxServerShare: 0.5, Servers: []string{"c"}}
	got := ops(Propose(fleet, p))
	// The split sends half of shard 1 to the empty server c; a still holds
	// 9900 of 16200 rows, so one of its 2700-row shards moves to the lightest, b.
	want := "split 1 a->c, merge 3->2, move 5 a->b"
	if got != want && got != "split 1 a->c, merge 3->2, move 4 a->b" {
		t.Fatalf("proposal:\n got %s\nwant %s", got, want)
	}
	// Inside the policy: nothing to do.
	inside := []Shard{rng(1, "a", 0, 4500), rng(2, "b", 1, 1800), rng(4, "b", 2, 2700), rng(5, "a", 3, 2700), rng(6, "c", 4, 4500)}
	if got := Propose(inside, p); len(got) != 0 {
		t.Fatalf("fleet inside the policy: %s", ops(got))
	}
}

func TestProposeBytesBusyAndNonRange(t *testing.T) {
	fleet := []Shard{
		{ID: 1, Server: "a", Func: 1, Kind: "RANGE", Rows: 10, Bytes: 5 << 20},
		{ID: 2, Server: "a", Func: 1, Kind: "RANGE", Order: 1, Rows: 10, Bytes: 5 << 20, Busy: true},
		{ID: 3, Server: "a", Func: 2, Kind: "LIST", Rows: 10, Bytes: 5 << 20},
		{ID: 4, Server: "b", Func: 0, Kind: "RANGE", Rows: 10, Bytes: 5 << 20}, // several mappings
	}
	got := ops(Propose(fleet, Policy{MaxShardBytes: 1 << 20}))
	if got != "split 1 a->b" {
		t.Fatalf("only shard 1 may split: %s", got)
	}
	// The busy neighbour is never merged.
	if got := Propose(fleet, Policy{MinShardRows: 100}); len(got) != 0 {
		t.Fatalf("merge next to a busy shard: %s", ops(got))
	}
}

func TestProposeDrain(t *testing.T) {
	fleet := []Shard{rng(1, "a", 0, 100), rng(2, "a", 1, 300), rng(3, "b", 2, 200), rng(4, "c", 3, 50)}
	got := ops(Propose(fleet, Policy{Drain: []string{"a"}}))
	// Largest first, each to the lightest server as it then is.
	if got != "move 2 a->c, move 1 a->b" {
		t.Fatalf("drain: %s", got)
	}
	// A drained server never receives a split or a merge.
	got = ops(Propose([]Shard{rng(1, "a", 0, 10), rng(2, "a", 1, 10), rng(3, "b", 2, 5000)}, Policy{Drain: []string{"a"}, MaxShardRows: 1000, MinShardRows: 100}))
	if strings.Contains(got, "->a") || strings.Contains(got, "merge") {
		t.Fatalf("drain with limits: %s", got)
	}
}

func TestProposeHashRing(t *testing.T) {
	h := func(id int, server string, order int, rows int64) Shard {
		return Shard{ID: id, Server: server, Func: 7, Kind: "HASH", Order: order, Rows: rows}
	}
	// Point order 0 holds 10 rows, 1 holds 20: merging folds the later point
	// into the one below it on the ring; the big arc is split at its midpoint.
	got := ops(Propose([]Shard{h(1, "a", 0, 10), h(2, "b", 1, 20), h(3, "a", 2, 5000)}, Policy{MinShardRows: 100, MaxShardRows: 1000}))
	if got != "split 3 a->b, merge 2->1" {
		t.Fatalf("hash ring: %s", got)
	}
}

func TestCanStartNeverTwoOnAShardOrServer(t *testing.T) {
	split := Op{Kind: Split, Shard: 1, From: "a", To: "c"}
	merge := Op{Kind: Merge, Shard: 3, Into: 2, From: "b", To: "b"}
	running := []Op{split, merge}
	cases := []struct {
		op         Op
		sameServer bool
		want       bool
	}{
		{Op{Kind: Move, Shard: 4, From: "d", To: "e"}, false, true},
		{Op{Kind: Move, Shard: 4, From: "a", To: "e"}, false, false}, // server a is busy
		{Op{Kind: Move, Shard: 4, From: "a", To: "e"}, true, true},
		{Op{Kind: Move, Shard: 2, From: "d", To: "e"}, true, false}, // shard 2 receives the merge
		{Op{Kind: Merge, Shard: 5, Into: 1, From: "d", To: "d"}, true, false},
	}
	for _, c := range cases {
		if got := CanStart(c.op, running, c.sameServer); got != c.want {
			t.Errorf("%v next to %v (same server %v): %v", c.op, running, c.sameServer, got)
		}
	}
}

func TestPolicyValid(t *testing.T) {
	for _, p := range []Policy{{MaxServerShare: 1.5}, {MaxShardRows: 10, MinShardRows: 10}, {MaxShardBytes: 5, MinShardBytes: 6}} {
		if p.Valid() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if err := (Policy{MaxShardRows: 10, MinShardRows: 5, MaxServerShare: 0.4}).Valid(); err != nil {
		t.Error(err)
	}
}

// TestAssessNamesWhatItCannotFix: the fleets that rebalance called
// "inside the policy": a shard over --max-shard-rows that is busy, a server
// at 51% with --max-server-share 0.5 where no move fits, and --drain of
// every server. Each limit left violated is listed with why.
func TestAssessNamesWhatItCannotFix(t *testing.T) {
	busy := rng(1, "a", 0, 900)
	busy.Busy, busy.BusyWith = true, "plan move-1 (stopped)"
	o, unmet := Assess([]Shard{busy, rng(2, "b", 1, 100)}, Policy{MaxShardRows: 500})
	if len(o) != 0 || len(unmet) != 1 || unmet[0].Shard != 1 || !strings.Contains(unmet[0].Why, "busy with plan move-1 (stopped)") {
		t.Fatalf("busy shard over the limit: ops %s, unmet %v", ops(o), unmet)
	}
	o, unmet = Assess([]Shard{rng(1, "a", 0, 510), rng(2, "b", 1, 490)}, Policy{MaxServerShare: 0.5})
	if len(o) != 0 || len(unmet) != 1 || unmet[0].Server != "a" || !strings.Contains(unmet[0].Why, "51% of the rows") {
		t.Fatalf("server at 51%%: ops %s, unmet %v", ops(o), unmet)
	}
	o, unmet = Assess([]Shard{rng(1, "a", 0, 10), rng(2, "b", 1, 10)}, Policy{Drain: []string{"a", "b"}})
	if len(o) != 0 || len(unmet) != 2 || !strings.Contains(unmet[0].Why, "every server is drained") {
		t.Fatalf("drain of every server: ops %s, unmet %v", ops(o), unmet)
	}
	if _, unmet := Assess([]Shard{rng(1, "a", 0, 400), rng(2, "b", 1, 400)}, Policy{MaxShardRows: 500, MaxServerShare: 0.6}); len(unmet) != 0 {
		t.Fatalf("a fleet inside the policy has unmet limits: %v", unmet)
	}
}

// list is a LIST shard of function 2 holding keys, each given as "key:rows".
func list(id int, server string, keys ...string) Shard {
	s := Shard{ID: id, Server: server, Func: 2, Kind: "LIST"}
	for _, k := range keys {
		var name string
		var rows int64
		fmt.Sscanf(strings.Replace(k, ":", " ", 1), "%s %d", &name, &rows)
		s.Keys = append(s.Keys, Key{Key: name, Rows: rows})
		s.Rows += rows
	}
	return s
}

func keyOps(os []Op) string {
	var b []string
	for _, o := range os {
		switch {
		case o.Kind == MoveKeys:
			b = append(b, fmt.Sprintf("move-keys %d[%s]->%d@%s", o.Shard, strings.Join(o.Keys, ","), o.Into, o.To))
		case len(o.Keys) > 0:
			b = append(b, fmt.Sprintf("split-keys %d[%s]->new@%s", o.Shard, strings.Join(o.Keys, ","), o.To))
		default:
			b = append(b, fmt.Sprintf("%s %d %s->%s", o.Kind, o.Shard, o.From, o.To))
		}
	}
	return strings.Join(b, ", ")
}

// A LIST fleet: a server over its share gives its heaviest tenants (as few
// as cover its excess), not a whole shard, into the LIST shard on the
// receiver with the most room; the keys bound for one shard are one move.
func TestProposeListMovesTenants(t *testing.T) {
	fleet := []Shard{
		list(1, "a", "1:500", "2:300", "3:200", "4:100"),
		list(2, "a", "10:250", "11:250"),
		list(3, "b", "20:100", "21:100"),
		list(4, "c", "30:150"),
	}
	// 1950 rows; at 0.5 server a (1600) must give 625: tenant 1 (500)
	// alone does not cover it, so the smallest that covers the rest (tenant
	// 3, 200) follows; the largest goes first, to the server with most room.
	got := keyOps(Propose(fleet, Policy{MaxServerShare: 0.5}))
	if got != "move-keys 1[1]->4@c, move-keys 1[3]->3@b" {
		t.Fatalf("share by tenants: %s", got)
	}
	// The keys of one shard bound for one destination are one operation.
	fleet = []Shard{list(1, "a", "1:300", "2:300", "3:300", "4:100"), list(3, "b", "20:100")}
	if got := keyOps(Propose(fleet, Policy{MaxServerShare: 0.6})); got != "move-keys 1[1,4]->3@b" {
		t.Fatalf("two keys to one shard: %s", got)
	}
	// A receiver without a LIST shard of the function (or none with room
	// under --max-shard-rows) gets the keys on a new shard of their own.
	fleet = []Shard{list(1, "a", "1:300", "2:300", "3:300"), list(3, "b", "20:500")}
	if got := keyOps(Propose(fleet, Policy{MaxServerShare: 0.6, MaxShardRows: 700, Servers: []string{"c"}})); got != "split-keys 1[2]->new@c" {
		t.Fatalf("no receiving shard with room: %s", got)
	}
}

// A tenant over --max-shard-rows is isolated on a shard of its own; a LIST
// shard over it without such a tenant splits by a key set of about half its
// rows; a tenant alone on its shard is left alone.
func TestProposeListIsolatesAndSplits(t *testing.T) {
	fleet := []Shard{
		list(1, "a", "1:900", "2:50", "3:50"),
		list(2, "b", "10:300", "11:300", "12:200", "13:100"),
		list(3, "c", "20:50"),
	}
	o, unmet := Assess(fleet, Policy{MaxShardRows: 800})
	// Tenant 1 goes to the lightest server, c; then a is the lightest, and
	// shard 2's 900 rows are dealt into two parts, heaviest key first onto
	// the lighter part (the shard's own on a tie): 10 and 12 stay, 11 and
	// 13 go.
	if got := keyOps(o); got != "split-keys 1[1]->new@c, split-keys 2[11,13]->new@a" {
		t.Fatalf("isolate and split: %s", got)
	}
	if len(unmet) != 0 {
		t.Fatalf("unmet: %v", unmet)
	}
	if !strings.Contains(o[0].Reason, "key 1 holds 900 rows") {
		t.Errorf("the isolation's reason: %s", o[0].Reason)
	}
	// Once isolated, a tenant over the limit is inside the policy: a key is
	// never divided, and a cron run must not report it stuck forever.
	o, unmet = Assess([]Shard{list(1, "a", "1:900", "2:0"), list(2, "b", "5:10")}, Policy{MaxShardRows: 800})
	if len(o) != 0 || len(unmet) != 0 {
		t.Fatalf("a lone tenant over the limit: %s, unmet %v", keyOps(o), unmet)
	}
}

// --min-shard-rows on a LIST fleet: LIST shards are not merged by the
// policy, so the two smallest under the minimum are an unmet limit naming
// the merge to run by hand, never "inside the policy" (issue 53); a pair
// over it, and a fleet of one LIST shard, are inside.
func TestAssessListUnderMinShardRows(t *testing.T) {
	fleet := []Shard{list(1, "a", "1:40", "2:30"), list(2, "b", "3:20"), list(3, "b", "4:900"), list(4, "a", "5:35")}
	o, unmet := Assess(fleet, Policy{MinShardRows: 100})
	if len(o) != 0 || len(unmet) != 1 || unmet[0].Shard != 2 || !strings.Contains(unmet[0].Why, "shardctl merge --shard 2 --into 4") || !strings.Contains(unmet[0].Why, "55 rows, under --min-shard-rows 100") {
		t.Fatalf("LIST shards under the minimum: ops %s, unmet %v", ops(o), unmet)
	}
	if _, unmet := Assess(fleet, Policy{MinShardRows: 50}); len(unmet) != 0 {
		t.Fatalf("no two LIST shards under 50 rows together: %v", unmet)
	}
	if _, unmet := Assess([]Shard{list(1, "a", "1:5")}, Policy{MinShardRows: 100}); len(unmet) != 0 {
		t.Fatalf("a lone LIST shard has nothing to merge with: %v", unmet)
	}
}

// A dedicated shard (an isolated tenant's) is counted in its server's rows
// and never touched: no key moves into it though it is the only LIST shard
// on the lightest server, none moves out of it though its server is over
// its share, and it is neither split over --max-shard-rows nor drained.
func TestProposeLeavesDedicatedShardsAlone(t *testing.T) {
	iso := list(3, "b", "526:50")
	iso.Dedicated = true
	fleet := []Shard{list(1, "a", "1:300", "2:300", "3:200"), list(2, "a", "10:100", "11:100"), iso}
	got := keyOps(Propose(fleet, Policy{MaxServerShare: 0.45, Servers: []string{"c"}}))
	if strings.Contains(got, "->3@") || strings.Contains(got, " 3[") || got == "" {
		t.Fatalf("keys moved into or out of the dedicated shard 3, or nothing proposed: %s", got)
	}
	big := list(4, "b", "40:900", "41:900")
	big.Dedicated = true
	o, unmet := Assess([]Shard{big, list(5, "a", "50:10")}, Policy{MaxShardRows: 1000})
	if len(o) != 0 || len(unmet) != 0 {
		t.Fatalf("a dedicated shard over --max-shard-rows: %s, unmet %v", keyOps(o), unmet)
	}
	o, unmet = Assess([]Shard{big, list(5, "a", "50:10")}, Policy{Drain: []string{"b"}})
	if len(o) != 0 || len(unmet) != 1 || !strings.Contains(unmet[0].Why, "dedicated") {
		t.Fatalf("drain of a dedicated shard's server: %s, unmet %v", keyOps(o), unmet)
	}
}

// A key that moved within --min-key-age stays: neither given for the
// server share nor dealt into a split; a shard left over its limit by such
// keys says so.
func TestProposeCoolDown(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	recent, old := now.Add(-time.Hour), now.Add(-48*time.Hour)
	fleet := []Shard{list(1, "a", "1:500", "2:300", "3:200", "4:100"), list(2, "b", "10:100")}
	fleet[0].Keys[0].MovedAt, fleet[0].Keys[1].MovedAt = &recent, &old
	p := Policy{MaxServerShare: 0.6, MinKeyAge: 24 * time.Hour, Now: now}
	got := keyOps(Propose(fleet, p))
	if strings.Contains(got, "[1") || !strings.Contains(got, "move-keys 1[") {
		t.Fatalf("share with key 1 cooling: %s", got)
	}
	p.MinKeyAge = 0
	if got := keyOps(Propose(fleet, p)); !strings.Contains(got, "1[1]") {
		t.Fatalf("without a cool-down key 1 (the heaviest) moves: %s", got)
	}
	// Split over --max-shard-rows 400: key 1 (500, cooling) stays, so the
	// shard stays over the limit, and says why.
	fleet = []Shard{list(1, "a", "1:500", "2:300", "3:200")}
	fleet[0].Keys[0].MovedAt = &recent
	o, unmet := Assess(fleet, Policy{MaxShardRows: 400, MinKeyAge: 24 * time.Hour, Now: now, Servers: []string{"b"}})
	if got := keyOps(o); strings.Contains(got, "[1") || len(unmet) != 1 || !strings.Contains(unmet[0].Why, "--min-key-age") {
		t.Fatalf("split with key 1 cooling: %s, unmet %v", got, unmet)
	}
}

// A LIST shard far over --max-shard-rows gets the whole chain of splits in
// one proposal: 320,000 rows over 60,000 (the shard) become parts
// all within the limit, each split onto the lightest server as it then is.
func TestProposeChainOfSplits(t *testing.T) {
	s := Shard{ID: 1, Server: "a", Func: 2, Kind: "LIST"}
	for k := 1; k <= 3200; k++ {
		rows := int64(50 + k%100) // 50-149 rows each, about 320,000 in all
		s.Keys = append(s.Keys, Key{Key: fmt.Sprint(k), Rows: rows, Bytes: rows * 100})
		s.Rows += rows
		s.Bytes += rows * 100
	}
	p := Policy{MaxShardRows: 60000, Servers: []string{"b", "c"}}
	o, unmet := Assess([]Shard{s}, p)
	if len(unmet) != 0 {
		t.Fatalf("unmet: %v", unmet)
	}
	left := s.Rows
	moved := map[string]bool{}
	for _, op := range o {
		if op.Kind != Split || op.Shard != 1 || op.Into != 0 || op.Rows > p.MaxShardRows {
			t.Fatalf("not a split of shard 1 onto a new shard within the limit: %s", op)
		}
		for _, k := range op.Keys {
			if moved[k] {
				t.Fatalf("key %s in two splits", k)
			}
			moved[k] = true
		}
		left -= op.Rows
		if d := op.Describe(); len(d) > 200 || !strings.Contains(d, "keys)") {
			t.Errorf("proposal line of %d characters, or keys not as runs and a count: %s", len(d), d)
		}
	}
	if want := int((s.Rows+p.MaxShardRows-1)/p.MaxShardRows) - 1; len(o) != want || left > p.MaxShardRows {
		t.Fatalf("%d splits leaving %d rows on the shard, want %d splits leaving at most %d", len(o), left, want, p.MaxShardRows)
	}
	// By bytes too: a tenant is weighed by the bytes it takes.
	o, _ = Assess([]Shard{s}, Policy{MaxShardBytes: s.Rows * 100 / 3, Servers: []string{"b"}})
	if len(o) != 3 {
		t.Fatalf("split by bytes into 4 parts: %d splits", len(o))
	}
}

// KeyRuns prints keys as runs and a count, in key order.
func TestKeyRuns(t *testing.T) {
	if got := KeyRuns([]string{"7", "3", "4", "5", "10", "11", "20", "30", "40"}); got != "3-5,7,10-11,… (9 keys)" {
		t.Errorf("runs: %q", got)
	}
	if got := KeyRuns([]string{"9"}); got != "9" {
		t.Errorf("one key: %q", got)
	}
}
