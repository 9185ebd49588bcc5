package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// A merge plan raises the target's counter above the merged shard's plus a
// margin when the two can meet (equal counters, as in shards made from one
// database), names nothing for a table whose ids cannot meet, nor for
// servers that interleave ids, nor for a target counter already above the
// margin; a column whose type leaves no room is refused, naming it.
func TestPlanMergeCounters(t *testing.T) {
	ctx := context.Background()
	ddl := "CREATE TABLE tickets (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, emp_no INT NOT NULL)"
	// Not raised: a counter inside a key that has the shard column (two
	// shards' rows never meet on it), and a MyISAM table without a counter
	// (MySQL 9 reports AUTO_INCREMENT 1 for it all the same).
	others := []string{"CREATE TABLE plain (id INT PRIMARY KEY)",
		"CREATE TABLE per_emp (emp_no INT NOT NULL, seq INT NOT NULL AUTO_INCREMENT, PRIMARY KEY (emp_no, seq), KEY (seq))",
		"CREATE TABLE log (emp_no INT NOT NULL, seq INT NOT NULL, PRIMARY KEY (emp_no, seq)) ENGINE=MyISAM"}
	env, src, p := checktest.Source(t, "merge", "chk_ctr", append([]string{ddl,
		"INSERT INTO tickets VALUES (1000001, 1000001)", "ALTER TABLE tickets AUTO_INCREMENT = 1000001000"}, append(others,
		"ALTER TABLE per_emp AUTO_INCREMENT = 1000001000")...)...)
	for i := range p.Copy {
		p.Copy[i].Sharded, p.Copy[i].ShardColumn = true, "emp_no"
	}
	dst := env.DB(t, 2, "")
	// Equal counters: the shards were made from one database.
	testenv.Schema(t, dst, "chk_ctr", append([]string{ddl, "INSERT INTO tickets VALUES (1, 1)", "ALTER TABLE tickets AUTO_INCREMENT = 1000001000"}, others...)...)
	raises := func() map[string]plans.Counter {
		t.Helper()
		if err := planCounters(ctx, src, dst, p); err != nil {
			t.Fatal(err)
		}
		out := map[string]plans.Counter{}
		for _, ct := range p.Counters {
			out[ct.Table] = ct
		}
		return out
	}
	got := raises()
	if tk := got["tickets"]; tk.Source != 1000001000 || tk.Target != 1000001000 || tk.RaiseTo != 2000002000 || tk.Margin != 1000001000 {
		t.Fatalf("tickets: %+v, want the target raised to 2000002000 (the merged shard's counter twice)", tk)
	}
	if len(got) != 2 || got["per_emp"].RaiseTo != 0 {
		t.Fatalf("counters %+v, want tickets and per_emp (not raised: its key has the shard column)", got)
	}
	var out strings.Builder
	plans.Print(&out, p)
	if !strings.Contains(out.String(), "ALTER TABLE `chk_ctr`.`tickets` AUTO_INCREMENT = 2000002000;") {
		t.Fatalf("the plan does not show the raise:\n%s", out.String())
	}

	// Servers that interleave ids: the target never issues one of the merged shard's.
	testenv.SetGlobal(t, src, "auto_increment_increment", 2)
	testenv.SetGlobal(t, dst, "auto_increment_increment", 2)
	testenv.SetGlobal(t, src, "auto_increment_offset", 1)
	testenv.SetGlobal(t, dst, "auto_increment_offset", 2)
	if tk := raises()["tickets"]; tk.RaiseTo != 0 {
		t.Fatalf("interleaved ids: %+v, want no raise", tk)
	}
	testenv.SetGlobal(t, dst, "auto_increment_offset", 1)

	// The target's counter above the merged shard's plus the margin already.
	testenv.Exec(t, dst, "ALTER TABLE chk_ctr.tickets AUTO_INCREMENT = 3000000000")
	if tk := raises()["tickets"]; tk.RaiseTo != 0 {
		t.Fatalf("the target's counter far above the merged shard's: %+v, want no raise", tk)
	}

	// A column with no room above the merged shard's counter.
	testenv.InSchema(t, src, "chk_ctr", "CREATE TABLE tiny (id TINYINT NOT NULL AUTO_INCREMENT PRIMARY KEY)", "INSERT INTO tiny VALUES (127)")
	testenv.InSchema(t, dst, "chk_ctr", "CREATE TABLE tiny (id TINYINT NOT NULL AUTO_INCREMENT PRIMARY KEY)")
	p.Copy = append(p.Copy, tables.Table{Name: "tiny", Sharded: true, ShardColumn: "emp_no"})
	checktest.WantRefused(t, planCounters(ctx, src, dst, p), "tiny.id (counter ")
}

// Create raises the merge target's counter from the live counters with the
// planned margin (the merged shard issued ids since planning), once; before
// each cutover attempt a merged shard whose counter reached the raise stops
// the merge.
func TestRaiseMergeCounters(t *testing.T) {
	ctx := context.Background()
	env := testenv.Get(t)
	src, dst := env.DB(t, 1, ""), env.DB(t, 2, "")
	ddl := "CREATE TABLE tickets (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, emp_no INT NOT NULL)"
	testenv.Schema(t, src, "raise_ctr", ddl, "ALTER TABLE tickets AUTO_INCREMENT = 1000")
	testenv.Schema(t, dst, "raise_ctr", ddl, "ALTER TABLE tickets AUTO_INCREMENT = 1000")
	p := checktest.Plan(t, env, "merge", "raise_ctr", "raise_ctr")
	p.Copy[0].Sharded, p.Copy[0].ShardColumn = true, "emp_no"
	if err := planCounters(ctx, src, dst, p); err != nil {
		t.Fatal(err)
	}
	if c := p.Counters[0]; c.RaiseTo != 1_001_000 || c.Margin != minCounterMargin {
		t.Fatalf("planned %+v, want a raise to 1001000 (the smallest margin)", c)
	}
	testenv.InSchema(t, src, "raise_ctr", "INSERT INTO tickets (id, emp_no) VALUES (5000, 1)")
	r := &runner{p: p, src: src, dst: dst, env: Env{Log: discard}}
	if err := r.raiseMergeCounters(ctx); err != nil {
		t.Fatal(err)
	}
	if c := p.Counters[0]; !c.Raised || c.RaiseTo != 1_005_001 {
		t.Fatalf("after create %+v, want raised to 1005001 (the merged shard's live counter plus the margin)", c)
	}
	testenv.InSchema(t, dst, "raise_ctr", "INSERT INTO tickets (emp_no) VALUES (2)")
	if err := r.raiseMergeCounters(ctx); err != nil { // a create run again: done already
		t.Fatal(err)
	}
	testenv.InSchema(t, dst, "raise_ctr", "INSERT INTO tickets (emp_no) VALUES (2)")
	if got := testenv.Dump(t, dst, "SELECT id FROM raise_ctr.tickets ORDER BY id"); len(got) != 2 || got[0] != `"1005001"` || got[1] != `"1005002"` {
		t.Fatalf("the target's ids %v, want 1005001 and 1005002", got)
	}
	if err := r.idsApart(ctx); err != nil {
		t.Fatalf("the merged shard's counter below the raise: %v", err)
	}
	testenv.InSchema(t, src, "raise_ctr", "INSERT INTO tickets (id, emp_no) VALUES (1005001, 1)")
	if err := r.idsApart(ctx); !errors.Is(err, errIdsMet) || !strings.Contains(err.Error(), "counter is 1005002") {
		t.Fatalf("the merged shard's counter past the raise: %v, want %v", err, errIdsMet)
	}
}
