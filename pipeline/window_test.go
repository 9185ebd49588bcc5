package pipeline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

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
	setupWindow(p)
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
	setupWindow(p) // idempotent
	if len(p.Steps) != len(plans.Steps)+1 {
		t.Fatalf("window step added twice")
	}
	q := plans.New("move", "no window")
	setupWindow(q)
	if q.Window != nil || len(q.Steps) != len(plans.Steps) {
		t.Fatal("a plan without --reverse-window got a window")
	}
}

func TestInWindow(t *testing.T) {
	p := windowPlan()
	setupWindow(p)
	if p.InWindow() {
		t.Fatal("in window before cutover")
	}
	p.Step(plans.StepCutover).State = plans.Done
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
	if !reverted(p) {
		t.Fatal("source serving after cutover is a reverted window")
	}
}

// The request handshake: one request at a time, taken once, by renaming it.
func TestTakeRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "move-1.json")
	if q, err := takeRequest(path); q != nil || err != nil {
		t.Fatalf("no request: %v %v", q, err)
	}
	b, _ := json.Marshal(requestFile{ID: "abc", Action: ActionRevert})
	if err := os.WriteFile(RequestPath(path), b, 0o600); err != nil {
		t.Fatal(err)
	}
	q, err := takeRequest(path)
	if err != nil || q == nil || q.ID != "abc" || q.Action != ActionRevert {
		t.Fatalf("take: %+v %v", q, err)
	}
	if _, err := os.Stat(RequestPath(path)); !os.IsNotExist(err) {
		t.Fatal("request file still there after it was taken")
	}
	if q, _ := takeRequest(path); q != nil {
		t.Fatal("a request was taken twice")
	}
	if err := os.WriteFile(RequestPath(path), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := takeRequest(path); err == nil {
		t.Fatal("a damaged request was accepted")
	}
}

func TestRecordRequestKeepsTen(t *testing.T) {
	p := windowPlan()
	setupWindow(p)
	r := &runner{p: p}
	for i := 0; i < 12; i++ {
		r.recordRequest(&requestFile{ID: string(rune('a' + i)), Action: ActionRevert}, nil)
	}
	if n := len(p.Window.Requests); n != 10 || p.Window.Requests[9].ID != "l" {
		t.Fatalf("requests %+v", p.Window.Requests)
	}
}
