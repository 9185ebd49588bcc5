package window

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

func windowPlan() *plans.Plan {
	p := plans.New("move", "move shard 3")
	p.Source = plans.Endpoint{ShardID: 3, Host: "10.0.0.1", Port: 3306, Schema: "s3"}
	p.Target = plans.Endpoint{ShardID: 3, Host: "10.0.0.2", Port: 3307, Schema: "s3"}
	ref := shardmap.Change{Op: shardmap.OpSetStatus, Status: shardmap.Online}
	p.Cutover = []shardmap.Change{{Op: shardmap.OpMoveLocation, ShardID: 3, Host: "10.0.0.2", Port: 3307}, ref}
	p.Options.ReverseWindowS = 60
	return p
}

// The window is data in the plan: a step before cleanup, and the changes of both directions.
func TestSetupWindow(t *testing.T) {
	p := windowPlan()
	Setup(p)
	var names []string
	for _, s := range p.Steps {
		names = append(names, s.Name)
	}
	if n := len(names); n != len(plans.Steps)+1 || names[n-2] != plans.StepWindow || names[n-1] != plans.StepCleanup {
		t.Fatalf("steps %v", names)
	}
	w := p.Window
	if w.Revert[0].Host != "10.0.0.1" || w.Revert[0].Port != 3306 || w.Forward[0].Host != "10.0.0.2" || len(w.Revert) != 2 {
		t.Fatalf("revert %+v forward %+v", w.Revert, w.Forward)
	}
	if p.Cutover[0].Host != "10.0.0.2" {
		t.Fatal("the cutover changes were modified")
	}
	Setup(p) // idempotent
	if len(p.Steps) != len(plans.Steps)+1 {
		t.Fatalf("window step added twice")
	}
	q := plans.New("move", "no window")
	Setup(q)
	if q.Window != nil || len(q.Steps) != len(plans.Steps) {
		t.Fatal("a plan without --reverse-window got a window")
	}
}

func TestInWindow(t *testing.T) {
	p := windowPlan()
	Setup(p)
	if p.InWindow() {
		t.Fatal("in window before cutover")
	}
	for _, s := range plans.Steps[:slices.Index(plans.Steps, plans.StepCutover)+1] {
		p.Step(s).State = plans.Done
	}
	p.State = plans.StateRunning
	if !p.InWindow() {
		t.Fatal("not in window after cutover")
	}
	p.Step(plans.StepWindow).State = plans.Done
	if p.InWindow() {
		t.Fatal("in window after it ended")
	}
	p.Step(plans.StepWindow).State = plans.Pending
	p.Window.Serving = plans.SideSource
	if !Reverted(p) {
		t.Fatal("source serving after cutover is a reverted window")
	}
}

// The request handshake: one request at a time, taken once, by renaming it.
func TestTakeRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "move-1.json")
	if q, err := Take(path); q != nil || err != nil {
		t.Fatalf("no request: %v %v", q, err)
	}
	b, _ := json.Marshal(Request{ID: "abc", Action: ActionRevert})
	if err := os.WriteFile(RequestPath(path), b, 0o600); err != nil {
		t.Fatal(err)
	}
	q, err := Take(path)
	if err != nil || q == nil || q.ID != "abc" || q.Action != ActionRevert {
		t.Fatalf("take: %+v %v", q, err)
	}
	if _, err := os.Stat(RequestPath(path)); !os.IsNotExist(err) {
		t.Fatal("request file still there after it was taken")
	}
	if q, _ := Take(path); q != nil {
		t.Fatal("a request was taken twice")
	}
	if err := os.WriteFile(RequestPath(path), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Take(path); err == nil {
		t.Fatal("a damaged request was accepted")
	}
}

func TestRecordRequestKeepsTen(t *testing.T) {
	p := windowPlan()
	Setup(p)
	for i := 0; i < 12; i++ {
		Record(p.Window, &Request{ID: string(rune('a' + i)), Action: ActionRevert}, nil)
	}
	if n := len(p.Window.Requests); n != 10 || p.Window.Requests[9].ID != "l" {
		t.Fatalf("requests %+v", p.Window.Requests)
	}
}

// A range merge's switch changes: going back splits the merged range out
// again before taking it offline; backing off merges it again.
func TestMergeWindowChanges(t *testing.T) {
	lower := keyspace.Key{Int: 2000}
	sref := shardmap.Ref{FuncID: 1, Kind: shardmap.Range, Lower: &lower}
	p := plans.New("merge", "merge shard 2 into 1")
	p.Source = plans.Endpoint{ShardID: 2, Host: "h2", Port: 1, Schema: "s2"}
	p.Target = plans.Endpoint{ShardID: 1, Host: "h1", Port: 1, Schema: "s1"}
	p.Cutover = []shardmap.Change{{Op: shardmap.OpRepoint, Ref: sref, ShardID: 1}, {Op: shardmap.OpSetStatus, Ref: sref, Status: shardmap.Online}, {Op: shardmap.OpMergeRange, Ref: sref}}
	p.Options.ReverseWindowS = 60
	Setup(p)
	ops := func(cs []shardmap.Change) (out []string) {
		for _, c := range cs {
			out = append(out, c.Op+"/"+c.Status)
		}
		return out
	}
	if got := ops(p.Window.Revert); len(got) != 2 || got[0] != "repoint/" || p.Window.Revert[0].ShardID != 2 || got[1] != "set_status/online" {
		t.Fatalf("revert %v", got)
	}
	if got := ops(OffChanges(p, plans.SideTarget)); len(got) != 2 || got[0] != "split_range/" || got[1] != "set_status/offline" {
		t.Fatalf("offline from the target %v", got)
	}
	if c := OffChanges(p, plans.SideTarget)[0]; c.At.Compare(lower) != 0 {
		t.Fatalf("split at %v, want %v", c.At, lower)
	}
	if got := ops(BackChanges(p, plans.SideTarget)); len(got) != 2 || got[0] != "set_status/online" || got[1] != "merge_range/" {
		t.Fatalf("back on the target %v", got)
	}
	if got := ops(OffChanges(p, plans.SideSource)); len(got) != 1 || got[0] != "set_status/offline" {
		t.Fatalf("offline from the source %v", got)
	}
}

// A hash merge: the ring point comes back (offline, at the target) before the switch.
func TestHashMergeWindowChanges(t *testing.T) {
	sref := shardmap.Ref{FuncID: 1, Kind: shardmap.Hash, Hash: "80000000000000000000000000000000"}
	p := plans.New("merge", "merge shard 2 into 1")
	p.Source = plans.Endpoint{ShardID: 2}
	p.Target = plans.Endpoint{ShardID: 1}
	p.Cutover = []shardmap.Change{{Op: shardmap.OpRemoveMapping, Ref: sref}}
	p.Options.ReverseWindowS = 60
	Setup(p)
	off := OffChanges(p, plans.SideTarget)
	if len(off) != 1 || off[0].Op != shardmap.OpAddHashPoint || off[0].ShardID != 1 || off[0].Status != shardmap.Offline {
		t.Fatalf("offline from the target %+v", off)
	}
	if r := p.Window.Revert; len(r) != 2 || r[0].Op != shardmap.OpRepoint || r[0].ShardID != 2 || r[1].Status != shardmap.Online {
		t.Fatalf("revert %+v", r)
	}
	if b := BackChanges(p, plans.SideTarget); len(b) != 1 || b[0].Op != shardmap.OpRemoveMapping {
		t.Fatalf("back on the target %+v", b)
	}
	if off := OffChanges(p, plans.SideSource); len(off) != 1 || off[0].Op != shardmap.OpSetStatus || off[0].Status != shardmap.Offline {
		t.Fatalf("offline from the source %+v", off)
	}
}
