package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/operation"
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

	// A key move: the margin is the key move's, not the source's counter.
	p.Operation = operation.MoveKeys
	if tk := raises()["tickets"]; tk.RaiseTo != 1000001000+keyMoveMargin || tk.Margin != keyMoveMargin {
		t.Fatalf("a key move's tickets: %+v, want the target raised to the source's counter plus %d", tk, keyMoveMargin)
	}
	p.Operation = operation.Merge

	// Servers that interleave ids: the target never issues one of the merged shard's.
	testenv.SetGlobal(t, src, "auto_increment_increment", 2)
	testenv.SetGlobal(t, dst, "auto_increment_increment", 2)
	testenv.SetGlobal(t, src, "auto_increment_offset", 1)
	testenv.SetGlobal(t, dst, "auto_increment_offset", 2)
	if tk := raises()["tickets"]; tk.RaiseTo != 0 || !tk.Interleaved {
		t.Fatalf("interleaved ids: %+v, want no raise, marked interleaved", tk)
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
	src, dst, p := planTickets(t, "raise_ctr", operation.Merge)
	if c := p.Counters[0]; c.RaiseTo != 1_001_000 || c.Margin != minCounterMargin {
		t.Fatalf("planned %+v, want a raise to 1001000 (the smallest margin)", c)
	}
	testenv.InSchema(t, src, "raise_ctr", "INSERT INTO tickets (id, emp_no) VALUES (5000, 1)")
	r := &runner{p: p, src: src, dst: dst, env: Env{Log: discard}}
	if err := r.raiseTargetCounters(ctx); err != nil {
		t.Fatal(err)
	}
	if c := p.Counters[0]; !c.Raised || c.RaiseTo != 1_005_001 {
		t.Fatalf("after create %+v, want raised to 1005001 (the merged shard's live counter plus the margin)", c)
	}
	testenv.InSchema(t, dst, "raise_ctr", "INSERT INTO tickets (emp_no) VALUES (2)")
	if err := r.raiseTargetCounters(ctx); err != nil { // a create run again: done already
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
	// A resumed run raises the target's counter again before its tail
	// starts, and the tail's guard moves with it.
	if err := r.raiseOutrun(ctx); err != nil {
		t.Fatal(err)
	}
	if c := p.Counters[0]; c.Guard != 1005002+minCounterMargin || r.idGuards()["tickets"] != (binlog.IDGuard{Column: "id", Guard: c.Guard}) {
		t.Fatalf("after the source outran the raise %+v (tail guards %v), want the target's counter at 2005002", c, r.idGuards())
	}
	if err := r.idsApart(ctx); err != nil {
		t.Fatalf("after raising again: %v", err)
	}
	if err := r.raiseOutrun(ctx); err != nil || p.Counters[0].Guard != 2005002 { // nothing outran it: no raise
		t.Fatalf("raised again with nothing outrun: %v, %+v", err, p.Counters[0])
	}
}

// One tenant moved back and forth between two shards, 100 and 1000 times,
// each shard issuing ids of its own between the moves and the source some
// during each move: every move keeps the source's ids below the target's
// counter (nothing can meet), and the counters grow by at most
// keyMoveMargin a move beyond the ids really issued, where the merge's rule
// (a margin the size of the source's counter) runs an INT UNSIGNED out of
// room within a dozen moves, as the issue saw.
func TestKeyMoveCountersStayProportional(t *testing.T) {
	const (
		start   = 2_792_100 // the payment counter
		hi      = 1<<32 - 1 // INT UNSIGNED
		between = 40        // ids each shard issues between two moves
		during  = 25        // ids the source issues during a move, before the fence
	)
	for _, n := range []int{100, 1000} {
		c := [2]uint64{start, start}
		issued := uint64(0)
		for i := range n {
			s, d := i%2, 1-i%2 // the tenant moves from shard s to shard d
			c[s], c[d] = c[s]+between, c[d]+between
			issued += between
			to, margin, ok := targetRaise(true, c[s], c[d], hi)
			if !ok || margin != keyMoveMargin {
				t.Fatalf("move %d: no room (%v) or margin %d", i, ok, margin)
			}
			if to > 0 {
				if to <= c[d] || to > max(c[s], c[d])+keyMoveMargin {
					t.Fatalf("move %d: raised %d to %d, source at %d", i, c[d], to, c[s])
				}
				c[d] = to
			}
			c[s] += during // the source keeps issuing until the fence
			issued += during
			if c[s] >= c[d] {
				t.Fatalf("move %d: the source's ids reached %d, the target's counter is %d", i, c[s], c[d])
			}
		}
		grew := max(c[0], c[1]) - start
		if bound := uint64(n)*keyMoveMargin + issued; grew > bound {
			t.Fatalf("%d moves: the counters grew by %d, want at most %d (the margin a move plus the ids issued)", n, grew, bound)
		}
		t.Logf("%d moves back and forth: counters %d and %d (from %d each; %d ids issued, %.4f%% of INT UNSIGNED used)",
			n, c[0], c[1], start, issued, float64(max(c[0], c[1]))/hi*100)
	}

	// The merge's rule, applied to each move, doubles the counter a move:
	// past 90% of the type within a dozen moves.
	c := [2]uint64{start, start}
	moves := 0
	for ; max(c[0], c[1]) < hi/10*9; moves++ {
		s, d := moves%2, 1-moves%2
		to, _, ok := targetRaise(false, c[s], c[d], hi)
		if !ok || to == 0 {
			t.Fatalf("the merge's rule: move %d from %d to %d found no raise", moves, c[s], c[d])
		}
		c[d] = to
	}
	if moves > 12 {
		t.Fatalf("the merge's rule took %d moves to pass 90%% of INT UNSIGNED, want the issue's dozen", moves)
	}
	t.Logf("the merge's rule on each move: %d after %d moves", max(c[0], c[1]), moves)

	// A busy source gets the ids it issues in keyMoveHorizon at its pace
	// between planning and create; an idle one the fixed margin.
	for _, tc := range []struct {
		issued  uint64
		elapsed time.Duration
		want    uint64
	}{{0, time.Second, keyMoveMargin}, {5, 0, keyMoveMargin}, {100, time.Second, 60_000}, {1, time.Hour, keyMoveMargin}, {1 << 62, time.Nanosecond, 1 << 62}} {
		if got := keyMoveMarginFor(tc.issued, tc.elapsed); got != tc.want {
			t.Errorf("%d ids issued in %s: margin %d, want %d", tc.issued, tc.elapsed, got, tc.want)
		}
	}

	// A target above the source plus the margin is left alone; a type with
	// no room for a margin is refused.
	if to, _, ok := targetRaise(true, 100, 100+keyMoveMargin, hi); !ok || to != 0 {
		t.Fatalf("a target counter above the source's plus the margin: raised to %d (%v), want none", to, ok)
	}
	if _, _, ok := targetRaise(true, 127, 5, 127); ok {
		t.Fatal("a TINYINT counter at its largest value: a raise was found")
	}
	if to, margin, ok := targetRaise(true, 120, 5, 127); !ok || margin != 3 || to != 123 {
		t.Fatalf("a TINYINT counter near its largest value: %d, %d, %v, want a raise to 123 (half the room)", to, margin, ok)
	}
}

// A counter past half its type's largest value is named with the advice;
// past four fifths, "soon".
func TestCounterWarning(t *testing.T) {
	c := plans.Counter{Table: "payment", Column: "payment_id", Max: 1<<32 - 1}
	if w := counterWarning(c, 2_792_100); w != "" {
		t.Fatalf("a counter at 0.07%%: %q", w)
	}
	if w := counterWarning(c, 3_000_000_000); !strings.Contains(w, "payment.payment_id") || !strings.Contains(w, "70%") || strings.Contains(w, "soon") {
		t.Fatalf("a counter at 70%%: %q", w)
	}
	if w := counterWarning(c, 3_936_003_071); !strings.Contains(w, "92%") || !strings.HasSuffix(w, "(BIGINT) soon") {
		t.Fatalf("a counter at 92%%: %q", w)
	}
}

// A key move's create sizes the margin by the source's pace between
// planning and create: 2,000 ids issued in the minute since planning are
// 20,000 in the ten minutes ahead, more than the fixed margin.
func TestRaiseKeyMoveCountersByPace(t *testing.T) {
	ctx := context.Background()
	src, dst, p := planTickets(t, "raise_keys", operation.MoveKeys)
	if c := p.Counters[0]; c.RaiseTo != 1000+keyMoveMargin || c.Margin != keyMoveMargin {
		t.Fatalf("planned %+v, want a raise to %d", c, 1000+keyMoveMargin)
	}
	p.CreatedAt = time.Now().Add(-time.Minute)
	testenv.InSchema(t, src, "raise_keys", "INSERT INTO tickets (id, emp_no) VALUES (2999, 1)")
	r := &runner{p: p, src: src, dst: dst, env: Env{Log: discard}}
	if err := r.raiseTargetCounters(ctx); err != nil {
		t.Fatal(err)
	}
	c := p.Counters[0]
	if c.Margin < 15_000 || c.Margin > 20_000 || c.RaiseTo != 3000+c.Margin || c.Guard != c.RaiseTo || !c.Raised {
		t.Fatalf("after create %+v, want a margin near 20,000 (2,000 ids a minute, for ten minutes) above the source's 3000", c)
	}
	if err := r.idsApart(ctx); err != nil {
		t.Fatal(err)
	}
}

// planTickets plans op's counters for a tickets table (ids that can meet)
// in schema on servers 1 and 2, both counters at 1000.
func planTickets(t *testing.T, schema, op string) (src, dst *sql.DB, p *plans.Plan) {
	t.Helper()
	env := testenv.Get(t)
	src, dst = env.DB(t, 1, ""), env.DB(t, 2, "")
	ddl := "CREATE TABLE tickets (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, emp_no INT NOT NULL)"
	testenv.Schema(t, src, schema, ddl, "ALTER TABLE tickets AUTO_INCREMENT = 1000")
	testenv.Schema(t, dst, schema, ddl, "ALTER TABLE tickets AUTO_INCREMENT = 1000")
	p = checktest.Plan(t, env, "merge", schema, schema)
	p.Operation = op
	p.Copy[0].Sharded, p.Copy[0].ShardColumn = true, "emp_no"
	if err := planCounters(context.Background(), src, dst, p); err != nil {
		t.Fatal(err)
	}
	return src, dst, p
}
