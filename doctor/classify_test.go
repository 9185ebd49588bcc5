package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

const (
	srvA = "127.0.0.1:3306"
	srvB = "127.0.0.1:3307"
)

// fleet is two shards on srvA (s1, s2), s2's mapping offline when offline2.
func fleet(offline2 bool) *Facts {
	lo1, lo2 := keyspace.IntK(0), keyspace.IntK(100)
	st := shardmap.Online
	if offline2 {
		st = shardmap.Offline
	}
	m := &shardmap.Map{
		Locations: []shardmap.Location{{ShardID: 1, Host: "127.0.0.1", Port: 3306, Schema: "s1"}, {ShardID: 2, Host: "127.0.0.1", Port: 3306, Schema: "s2"}},
		Mappings: []shardmap.Mapping{{FuncID: 1, Kind: shardmap.Range, Lower: &lo1, ShardID: 1, Status: shardmap.Online},
			{FuncID: 1, Kind: shardmap.Range, Lower: &lo2, ShardID: 2, Status: st}},
	}
	return &Facts{Now: time.Now(), Map: m, StoreOK: true,
		Servers: []ServerFacts{{Addr: srvA, Schemas: []string{"s1", "s2"}}, {Addr: srvB}}}
}

// move is a plan moving shard 2 from srvA to srvB, stopped at the fence.
func move(id string) *plans.Plan {
	p := plans.New("move", "shard 2 to "+srvB)
	p.ID = id
	p.Source = plans.Endpoint{ShardID: 2, Host: "127.0.0.1", Port: 3306, Schema: "s2"}
	p.Target = plans.Endpoint{ShardID: 2, Host: "127.0.0.1", Port: 3307, Schema: "s2"}
	p.State = plans.StateStopped
	for i := range p.Steps {
		if p.Steps[i].Name == plans.StepFence {
			p.Steps[i].State, p.Steps[i].Attempts = plans.Failed, 1
			break
		}
		p.Steps[i].State = plans.Done
	}
	return p
}

func kinds(fs []Finding) string {
	var ks []string
	for _, f := range fs {
		ks = append(ks, f.Kind)
	}
	return strings.Join(ks, " ")
}

func TestHealthyFleetHasNoFindings(t *testing.T) {
	if fs := Classify(fleet(false)); len(fs) != 0 {
		t.Fatalf("%+v", fs)
	}
}

// A stopped plan is one finding naming resume (and abort before cutover);
// the fence and offline mapping it holds are its, not reported apart.
func TestStoppedPlanOwnsItsFenceAndMapping(t *testing.T) {
	f := fleet(true)
	f.Servers[0].Fences = []FenceFacts{{Schema: "s2", Tables: []string{"t"}, Fenced: true}}
	p := move("move-1")
	f.Plans = []PlanFacts{{Plan: p, File: p, Row: p, Path: "/x/move-1.json"}}
	fs := Classify(f)
	if kinds(fs) != KindPlanStopped {
		t.Fatalf("findings: %s", kinds(fs))
	}
	if fs[0].Command != "shardctl plan resume move-1" || fs[0].Alternative != "shardctl plan abort move-1 (undo it)" || fs[0].Fixable ||
		!strings.Contains(fs[0].What, "fenced") || !strings.Contains(fs[0].What, "offline") {
		t.Fatalf("%+v", fs[0])
	}
	// After cutover, abort is no way out.
	p.Step(plans.StepCutover).State = plans.Done
	if fs := Classify(f); fs[0].Alternative != "" {
		t.Fatalf("%+v", fs[0])
	}
	// A running plan is its process's to finish: nothing at all.
	f.Plans[0].Running = true
	if fs := Classify(f); len(fs) != 0 {
		t.Fatalf("running plan: %s", kinds(fs))
	}
	// A plan written for review and never run owns nothing.
	f.Plans[0] = PlanFacts{Plan: plans.New("move", "review")}
	if fs := Classify(f); kinds(fs) != KindFence+" "+KindOffline {
		t.Fatalf("review plan: %s", kinds(fs))
	}
}

// With no plan, a serving shard's fence and offline mapping are fixable;
// a mapping whose schema is missing is not.
func TestOrphanFenceAndOfflineMapping(t *testing.T) {
	f := fleet(true)
	f.Servers[0].Fences = []FenceFacts{{Schema: "s2", Tables: []string{"a", "b"}, Fenced: true}}
	fs := Classify(f)
	if kinds(fs) != KindFence+" "+KindOffline || !fs[0].Fixable || !fs[1].Fixable || fs[0].ShardID != 2 || strings.Join(fs[0].tables, ",") != "a,b" ||
		!strings.Contains(fs[1].What, "after lifting its fence") {
		t.Fatalf("%+v", fs)
	}
	// A fence table left without its triggers is a fence left too.
	f.Servers[0].Fences = []FenceFacts{{Schema: "s2", Tables: []string{}}}
	if fs := Classify(f); kinds(fs) != KindFence+" "+KindOffline || !strings.Contains(fs[0].What, "the fence table _shardctl_fence without its triggers") {
		t.Fatalf("%+v", fs)
	}
	f.Servers[0].Fences = nil
	f.Servers[0].Schemas = []string{"s1"}
	fs = Classify(f)
	if kinds(fs) != KindOffline || fs[0].Fixable || fs[0].Command != "shardctl shardmap set-status --shard 2 online" {
		t.Fatalf("missing schema: %+v", fs)
	}
	// An unreachable server: its shard is not put online blind.
	f.Servers[0].Error = "refused"
	fs = Classify(f)
	if kinds(fs) != KindUnreachable+" "+KindOffline || fs[1].Fixable {
		t.Fatalf("unreachable: %+v", fs)
	}
}

func TestExpiredWindow(t *testing.T) {
	f := fleet(false)
	p := move("move-w")
	for i := range p.Steps {
		p.Steps[i].State = plans.Done
	}
	p.Steps[len(p.Steps)-1].State = plans.Pending
	p.Steps = append(p.Steps[:len(p.Steps)-1], plans.StepRecord{Name: plans.StepWindow, State: plans.Running}, p.Steps[len(p.Steps)-1])
	p.Window = &plans.Window{Until: f.Now.Add(time.Minute), Serving: plans.SideTarget}
	f.Plans = []PlanFacts{{Plan: p, File: p, Row: p}}
	if fs := Classify(f); kinds(fs) != KindPlanStopped {
		t.Fatalf("window still open: %s", kinds(fs))
	}
	p.Window.Until = f.Now.Add(-time.Minute)
	fs := Classify(f)
	if kinds(fs) != KindWindowExpired || fs[0].Command != "shardctl plan complete move-w" {
		t.Fatalf("%+v", fs)
	}
}

func TestPlanCopiesDisagree(t *testing.T) {
	f := fleet(false)
	file, row := move("move-c"), move("move-c")
	file.State, row.State = plans.StateDone, plans.StateDone
	for i := range file.Steps {
		file.Steps[i].State, row.Steps[i].State = plans.Done, plans.Done
	}
	file.Revision, row.Revision = 7, 5
	f.Plans = []PlanFacts{{Plan: file, File: file, Row: row, Path: "/x/move-c.json"}}
	fs := Classify(f)
	if kinds(fs) != KindPlanCopies || !fs[0].Fixable || !strings.Contains(fs[0].What, "the file's copy") {
		t.Fatalf("%+v", fs)
	}
	row.Revision = 9
	if fs := Classify(f); !strings.Contains(fs[0].What, "the row's copy") {
		t.Fatalf("%+v", fs)
	}
	// A file with no row: reported only when the plans table was read.
	f.Plans[0].Row = nil
	if fs := Classify(f); kinds(fs) != KindPlanCopies {
		t.Fatalf("%s", kinds(fs))
	}
	f.StoreOK = false
	if fs := Classify(f); len(fs) != 0 {
		t.Fatalf("%s", kinds(fs))
	}
	// A row with no file here is another host's plan.
	f.StoreOK = true
	f.Plans[0] = PlanFacts{Plan: row, Row: row}
	if fs := Classify(f); len(fs) != 0 {
		t.Fatalf("%s", kinds(fs))
	}
}

// A copy an ended plan used, that no location names, is reported with the
// statement that drops it, never fixed; a copy kept on request and a
// schema no plan names are left alone.
func TestCopyLeft(t *testing.T) {
	f := fleet(false)
	p := move("move-a")
	p.State = plans.StateAborted
	f.Plans = []PlanFacts{{Plan: p, File: p, Row: p}}
	f.Servers[1].Schemas = []string{"s2"}
	fs := Classify(f)
	if kinds(fs) != KindCopy || fs[0].Fixable || fs[0].Server != srvB || fs[0].Command != "check it holds nothing you need, then on "+srvB+": DROP DATABASE `s2`" {
		t.Fatalf("%+v", fs)
	}
	// The target serves (a done move): nothing.
	f.Map.Locations[1].Port = 3307
	f.Servers[0].Schemas = []string{"s1"}
	p.State = plans.StateDone
	if fs := Classify(f); len(fs) != 0 {
		t.Fatalf("%s", kinds(fs))
	}
	// The source kept on request by a done move: nothing.
	f.Servers[0].Schemas = []string{"s1", "s2"}
	p.KeepSource = true
	if fs := Classify(f); len(fs) != 0 {
		t.Fatalf("%s", kinds(fs))
	}
	p.KeepSource = false
	if fs := Classify(f); kinds(fs) != KindCopy || fs[0].Server != srvA {
		t.Fatalf("%+v", fs)
	}
	// With no plan naming it, a schema is not doctor's to judge.
	f.Plans = nil
	if fs := Classify(f); len(fs) != 0 {
		t.Fatalf("%s", kinds(fs))
	}
}

func TestLocks(t *testing.T) {
	f := fleet(false)
	f.Locks = []LockFacts{
		{Name: "alive", Holder: "x", ConnID: 1, Held: true},
		{Name: "dead", Holder: "y", ConnID: 2, Held: true, Dead: "idle 90 s"},
		{Name: "free", Holder: "z", ConnID: 3},
	}
	fs := Classify(f)
	if kinds(fs) != KindLockDead+" "+KindLockRow || fs[0].lock.Name != "dead" || fs[1].lock.Name != "free" || !fs[0].Fixable || !fs[1].Fixable {
		t.Fatalf("%+v", fs)
	}
	// A free lock blocks nothing: worth a note, not a failure.
	if fs[0].Info || !fs[1].Info {
		t.Fatalf("a held dead lock is a failure, a free one a note: %+v", fs)
	}
}
