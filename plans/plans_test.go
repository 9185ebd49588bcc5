package plans

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/tables/tabledef"
	"github.com/shardctl/shardctl/watermark"
)

func sample() *Plan {
	p := New("move", "move shard 3 to 127.0.0.1:3308")
	p.Source = Endpoint{ShardID: 3, Host: "127.0.0.1", Port: 3306, Schema: "shard_3"}
	p.Target = Endpoint{ShardID: 3, Host: "127.0.0.1", Port: 3308, Schema: "shard_3"}
	lo, hi := keyspace.IntK(100), keyspace.IntK(200)
	p.Copy = []tabledef.Table{{Name: "employees", Columns: []string{"emp_no", "name"}, PK: []string{"emp_no"}, EstRows: 1000,
		Filter: keyspace.Filter{Column: "emp_no", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}}}
	p.Checkpoints.Copy["employees"] = watermark.Mark{After: []string{"150"}, Rows: 50}
	return p
}

func TestSaveLoadRoundTripAndMode(t *testing.T) {
	dir := t.TempDir()
	p := sample()
	path := Path(dir, p.ID)
	if err := Save(path, p); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", st.Mode(), err)
	}
	q, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	sameFile(t, "round trip", p, q)
	// A fresh plan has empty checkpoint maps, which the file omits: they come back usable.
	fresh := New("move", "x")
	_ = Save(Path(dir, "fresh"), fresh)
	back, err := Load(Path(dir, "fresh"))
	if err != nil || back.Checkpoints.Prune == nil || back.Checkpoints.Copy == nil {
		t.Fatalf("checkpoint maps after load: %+v %v", back.Checkpoints, err)
	}
	os.Remove(Path(dir, "fresh"))
	if left, _ := filepath.Glob(filepath.Join(dir, ".plan-*")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
	list, err := List(dir)
	if err != nil || len(list) != 1 || list[0].Step != StepPreflight || list[0].Operation != "move" {
		t.Fatalf("list: %+v %v", list, err)
	}
}

// A clone saves as the plan does, and shares nothing with it: the run
// goes on changing the plan while the clone is written.
func TestCloneIsADeepCopyThatSavesTheSame(t *testing.T) {
	p := sample()
	q, err := Clone(p)
	if err != nil {
		t.Fatal(err)
	}
	sameFile(t, "clone", p, q)
	q.Checkpoints.Copy["employees"] = watermark.Mark{After: []string{"199"}, Rows: 99}
	q.Copy[0].Columns[0] = "changed"
	if p.Checkpoints.Copy["employees"].Rows != 50 || p.Copy[0].Columns[0] != "emp_no" {
		t.Fatalf("changing the clone changed the plan: %+v %v", p.Checkpoints.Copy, p.Copy[0].Columns)
	}
}

// sameFile fails the test unless p and q are saved as the same file.
func sameFile(t *testing.T, what string, p, q *Plan) {
	t.Helper()
	a, _ := Marshal(p)
	b, _ := Marshal(q)
	if !bytes.Equal(a, b) {
		t.Fatalf("%s: the plans save differently:\n%s\n%s", what, a, b)
	}
}

func TestDamagedOrEditedPlanIsRefused(t *testing.T) {
	dir := t.TempDir()
	p := sample()
	path := Path(dir, p.ID)
	if err := Save(path, p); err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(path)
	edits := map[string][]byte{
		"edited value": bytes.Replace(orig, []byte(`"rows": 50`), []byte(`"rows": 51`), 1),
		"truncated":    orig[:len(orig)/2],
		"garbage":      []byte("hello"),
		"other json":   []byte(`{"format":"x"}`),
	}
	for name, b := range edits {
		if bytes.Equal(b, orig) {
			t.Fatalf("%s: edit did not apply", name)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); !errors.Is(err, ErrDamaged) {
			t.Errorf("%s: Load = %v, want ErrDamaged", name, err)
		}
	}
	// Whitespace-only changes keep the content, so they pass.
	if err := os.WriteFile(path, bytes.ReplaceAll(orig, []byte("\n"), []byte("\r\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Errorf("reformatted file refused: %v", err)
	}
}

func TestPrintShowsStepsTablesAndSQL(t *testing.T) {
	p := sample()
	p.SQLPreview = []string{"UPDATE `shardmap`.`locations` SET host = '127.0.0.1', port = 3308 WHERE shard_id = 3"}
	var b bytes.Buffer
	Print(&b, p)
	out := b.String()
	for _, want := range []string{"preflight", "cleanup", "employees", "`emp_no` >= 100", "UPDATE `shardmap`.`locations`", "1000"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan print lacks %q:\n%s", want, out)
		}
	}
}

// The counters' part of a plan's print: the raise, the servers that
// interleave ids, a counter past half its type.
func TestPrintShowsCounters(t *testing.T) {
	p := sample()
	p.Counters = []Counter{{Table: "payment", Column: "payment_id", Max: 1<<32 - 1, Source: 2_792_136, Target: 2_792_100, RaiseTo: 2_802_136, Margin: 10_000,
		Warning: "payment.payment_id: AUTO_INCREMENT counter at 3936003071 after this operation, 92% of its type's largest value 4294967295; widen the column (BIGINT) soon"}}
	var b bytes.Buffer
	Print(&b, p)
	for _, want := range []string{"ALTER TABLE `shard_3`.`payment` AUTO_INCREMENT = 2802136;", "source's counter 2792136, target's 2792100; room for 10000", "WARNING: payment.payment_id: AUTO_INCREMENT counter at 3936003071"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("plan print lacks %q:\n%s", want, b.String())
		}
	}
	p.Counters = []Counter{{Table: "payment", Column: "payment_id", Max: 1<<32 - 1, Interleaved: true}}
	b.Reset()
	Print(&b, p)
	if !strings.Contains(b.String(), "the servers interleave ids") || strings.Contains(b.String(), "AUTO_INCREMENT =") {
		t.Errorf("interleaved ids: the print shows a raise or no word of the interleaving:\n%s", b.String())
	}
}

// TestForgedStateIsDamaged: a plan whose state was edited and the checksum
// computed again is refused as damaged when its steps say otherwise.
func TestForgedStateIsDamaged(t *testing.T) {
	forge := func(edit func(p *Plan)) error {
		p := New("move", "move shard 1")
		edit(p)
		b, err := Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Unmarshal(b)
		return err
	}
	for name, edit := range map[string]func(p *Plan){
		"done with steps pending":  func(p *Plan) { p.State = StateDone },
		"new with a step done":     func(p *Plan) { p.Step(StepPreflight).State = Done },
		"cutover before the fence": func(p *Plan) { p.State = StateStopped; p.Step(StepCutover).State = Done },
		"an unknown state":         func(p *Plan) { p.State = "finished" },
	} {
		if err := forge(edit); !errors.Is(err, ErrDamaged) {
			t.Errorf("%s: %v, want damaged", name, err)
		}
	}
	if err := forge(func(p *Plan) {
		p.State = StateStopped
		p.Step(StepPreflight).State, p.Step(StepCreate).State, p.Step(StepCopy).State = Done, Done, Failed
	}); err != nil {
		t.Errorf("a plan stopped in its copy step: %v", err)
	}
}
