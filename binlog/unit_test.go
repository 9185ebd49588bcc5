package binlog

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/schema"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/tables"
)

func TestPositionCompareAndParse(t *testing.T) {
	p := func(s string) Position {
		t.Helper()
		q, err := ParsePosition(s)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	ordered := []Position{
		{},
		p("x.000009:4"),
		p("x.000009:1234"),
		p("x.000010:4"),
		p("x.000010:99"),
		p("x.999999:4"),
		p("x.1000000:4"), // the suffix outgrew its padding
	}
	for i := range ordered {
		for j := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := ordered[i].Compare(ordered[j]); got != want {
				t.Errorf("%s.Compare(%s) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
	if got := p("mariadb-bin.000003:1234").String(); got != "mariadb-bin.000003:1234" {
		t.Errorf("String = %q", got)
	}
	if !(Position{}).IsZero() || p("a.1:4").IsZero() {
		t.Error("IsZero")
	}
	for _, bad := range []string{"", "x.000001", ":4", "x.000001:", "x.000001:abc", "x.000001:99999999999"} {
		if _, err := ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) accepted", bad)
		}
	}
}

func TestPlanUpdate(t *testing.T) {
	cases := []struct {
		beforeIn, afterIn, pkChanged bool
		del, up                      bool
	}{
		{true, true, false, false, true},    // ordinary update in range
		{true, true, true, true, true},      // key changes inside the range: old key goes
		{true, false, false, true, false},   // moves out of the range
		{true, false, true, true, false},    // moves out with a new key
		{false, true, false, false, true},   // moves into the range
		{false, true, true, false, true},    // moves in with a new key: the old key was never ours
		{false, false, false, false, false}, // not ours at all
		{false, false, true, false, false},
	}
	for _, c := range cases {
		del, up := planUpdate(c.beforeIn, c.afterIn, c.pkChanged)
		if del != c.del || up != c.up {
			t.Errorf("planUpdate(before in=%v, after in=%v, pk changed=%v) = delete %v upsert %v, want %v %v",
				c.beforeIn, c.afterIn, c.pkChanged, del, up, c.del, c.up)
		}
	}
}

func testShape(t *testing.T, tb tables.Table, cols ...schema.TableColumn) *shape {
	t.Helper()
	ct := &schema.Table{Schema: "src", Name: tb.Name, Columns: cols}
	s, err := newShape(&tb, ct, "dst", false, false)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestShapeChecksDefinition(t *testing.T) {
	tb := tables.Table{Name: "t", Columns: []string{"id", "v"}, PK: []string{"id"}}
	ct := &schema.Table{Schema: "src", Name: "t", Columns: []schema.TableColumn{{Name: "id"}, {Name: "v"}, {Name: "w"}}}
	if _, err := newShape(&tb, ct, "dst", false, false); !errors.Is(err, ErrDDL) {
		t.Fatalf("extra column: %v", err)
	}
	ct.Columns = []schema.TableColumn{{Name: "id"}, {Name: "w"}}
	if _, err := newShape(&tb, ct, "dst", false, false); !errors.Is(err, ErrDDL) {
		t.Fatalf("renamed column: %v", err)
	}
}

func TestNormalizeAndScope(t *testing.T) {
	lo, hi := keyspace.IntK(100), keyspace.IntK(200)
	tb := tables.Table{Name: "t", Columns: []string{"id", "s", "d", "bits", "u"}, PK: []string{"id"},
		Filter: keyspace.Filter{Column: "id", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}}
	s := testShape(t, tb,
		schema.TableColumn{Name: "id", Type: schema.TYPE_NUMBER},
		schema.TableColumn{Name: "s", Type: schema.TYPE_STRING},
		schema.TableColumn{Name: "d", Type: schema.TYPE_DECIMAL},
		schema.TableColumn{Name: "bits", Type: schema.TYPE_BIT},
		schema.TableColumn{Name: "u", Type: schema.TYPE_NUMBER, IsUnsigned: true},
	)
	row, err := s.normalize([]any{int32(150), "", "1.50", int64(-1), uint64(1 << 63)})
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(150), []byte{}, "1.50", uint64(1<<64 - 1), uint64(1 << 63)}
	if !reflect.DeepEqual(row, want) {
		t.Fatalf("normalize = %#v, want %#v", row, want)
	}
	if b := row[1].([]byte); b == nil {
		t.Fatal("empty string became NULL")
	}
	for _, c := range []struct {
		id any
		in bool
	}{{int32(99), false}, {int32(100), true}, {int32(199), true}, {int32(200), false}, {nil, false}} {
		r, err := s.normalize([]any{c.id, nil, nil, nil, nil})
		if err != nil {
			t.Fatal(err)
		}
		in, err := s.inScope(&tb, r)
		if err != nil || in != c.in {
			t.Errorf("id %v in scope = %v (%v), want %v", c.id, in, err, c.in)
		}
	}
	if _, err := s.normalize([]any{struct{}{}, nil, nil, nil, nil}); err == nil {
		t.Error("an unknown value type was accepted")
	}
}

func TestBuildStatements(t *testing.T) {
	a := testShape(t, tables.Table{Name: "a", Columns: []string{"id", "v", "g"}, PK: []string{"id"}},
		schema.TableColumn{Name: "id"}, schema.TableColumn{Name: "v"}, schema.TableColumn{Name: "g", IsVirtual: true})
	b := testShape(t, tables.Table{Name: "b", Columns: []string{"k1", "k2", "v"}, PK: []string{"k1", "k2"}},
		schema.TableColumn{Name: "k1"}, schema.TableColumn{Name: "k2"}, schema.TableColumn{Name: "v"})
	acts := []action{
		a.upsert([]any{int64(1), "x", int64(2)}, true),
		a.upsert([]any{int64(2), "y", int64(4)}, true),
		a.upsert([]any{int64(3), "z", int64(6)}, true),
		a.delete([]any{int64(1), "x", int64(2)}, true),
		a.delete([]any{int64(2), "y", int64(4)}, true),
		b.delete([]any{int64(1), "k", nil}, true),
		b.delete([]any{int64(2), "k", nil}, true),
		a.upsert([]any{int64(4), "w", int64(8)}, true),
	}
	got := buildStatements(acts, limits{rows: 2, bytes: 1 << 20})
	// Compacted: rows 1 and 2 end deleted, so their upserts go; deletes come
	// first, then the upserts of each table, merged into multi-row statements.
	want := []stmt{
		{table: "a", sql: "DELETE FROM `dst`.`a` WHERE `id` IN (?, ?)", args: []any{int64(1), int64(2)}},
		{table: "b", sql: "DELETE FROM `dst`.`b` WHERE (`k1` = ? AND `k2` = ?) OR (`k1` = ? AND `k2` = ?)", args: []any{int64(1), "k", int64(2), "k"}},
		{table: "a", sql: "REPLACE INTO `dst`.`a` (`id`, `v`) VALUES (?, ?),(?, ?)", args: []any{int64(3), "z", int64(4), "w"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("statements:\n got %#v\nwant %#v", got, want)
	}
	// The last change of a row wins, whatever came before it.
	got = buildStatements([]action{a.delete([]any{int64(5), "q", nil}, true), a.upsert([]any{int64(5), "r", int64(0)}, true),
		a.upsert([]any{int64(6), "s", int64(0)}, true), a.upsert([]any{int64(5), "t", int64(0)}, true)}, limits{rows: 100, bytes: 1 << 20})
	if len(got) != 1 || !reflect.DeepEqual(got[0].args, []any{int64(6), "s", int64(5), "t"}) {
		t.Fatalf("last change wins: %#v", got)
	}
	// One row changed under two shapes of its table (canal reloaded the
	// definition between its upsert and its delete) is still one row: its
	// last change, the delete, is all that is applied.
	a2 := testShape(t, tables.Table{Name: "a", Columns: []string{"id", "v", "g"}, PK: []string{"id"}},
		schema.TableColumn{Name: "id"}, schema.TableColumn{Name: "v"}, schema.TableColumn{Name: "g", IsVirtual: true})
	got = buildStatements([]action{a.upsert([]any{int64(7), "u", int64(0)}, true), a2.delete([]any{int64(7), "u", nil}, true)}, limits{rows: 100, bytes: 1 << 20})
	if len(got) != 1 || !strings.HasPrefix(got[0].sql, "DELETE") {
		t.Fatalf("a row under two shapes: %#v", got)
	}
	// The size limit splits runs too, but never below one row.
	got = buildStatements(acts[:3], limits{rows: 1000, bytes: 1})
	if len(got) != 3 {
		t.Fatalf("byte limit: %d statements, want 3", len(got))
	}
}

func TestDDLText(t *testing.T) {
	cases := []struct {
		q              string
		ddl, tables    bool
		mentionsShard3 bool
	}{
		{"ALTER ONLINE TABLE t ADD COLUMN c INT", true, true, false},
		{"/* x */ create or replace table `shard_3`.t (id int)", true, true, true},
		{"CREATE DEFINER=`shardctl`@`%` TRIGGER `shard_3`.`fence` BEFORE INSERT ON `t` FOR EACH ROW SET @a = 1", true, false, true},
		{"DROP TRIGGER IF EXISTS shard_3.fence", true, false, true},
		{"RENAME TABLE other.t TO shard_3.t", true, true, true},
		{"ALTER TABLE shard_30.t ADD c INT", true, true, false},
		{"ALTER TABLE t COMMENT 'shard_3'", true, true, false},
		{"INSERT INTO shard_3.t VALUES (1)", false, true, true},
		{"ALTER TABLE \"Shard_3\".t ADD c INT", true, true, true},
	}
	for _, c := range cases {
		if got := looksLikeDDL(c.q); got != c.ddl {
			t.Errorf("looksLikeDDL(%q) = %v", c.q, got)
		}
		if got := touchesTables(c.q); got != c.tables {
			t.Errorf("touchesTables(%q) = %v", c.q, got)
		}
		if got := mentionsIdent(c.q, "shard_3"); got != c.mentionsShard3 {
			t.Errorf("mentionsIdent(%q) = %v", c.q, got)
		}
	}
	err := ddlError("shard_3", "t", "ALTER TABLE t ADD c INT", "at x.000001:100")
	for _, s := range []string{"shard_3.t", "ALTER TABLE t ADD c INT", "x.000001:100", "stopped safely", "restart"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("DDL error %q lacks %q", err, s)
		}
	}
	if !errors.Is(err, ErrDDL) {
		t.Error("DDL error does not wrap ErrDDL")
	}
}

// A cascading parent's delete keeps the source order (the batch is not
// compacted), is never merged, and carries the parent's image.
func TestCascadingDeleteStatements(t *testing.T) {
	p := testShape(t, tables.Table{Name: "p", Columns: []string{"id", "v"}, PK: []string{"id"}}, schema.TableColumn{Name: "id"}, schema.TableColumn{Name: "v"})
	p.cascade = true
	c := testShape(t, tables.Table{Name: "c", Columns: []string{"id", "pid"}, PK: []string{"id"}}, schema.TableColumn{Name: "id"}, schema.TableColumn{Name: "pid"})
	acts := []action{c.upsert([]any{int64(7), int64(1)}, true), p.rowDelete([]any{int64(1), "x"}), p.rowDelete([]any{int64(2), "y"})}
	got := buildStatements(acts, limits{rows: 100, bytes: 1 << 20})
	want := []stmt{
		{table: "c", sql: "REPLACE INTO `dst`.`c` (`id`, `pid`) VALUES (?, ?)", args: []any{int64(7), int64(1)}},
		{table: "p", sql: "DELETE FROM `dst`.`p` WHERE `id` IN (?)", args: []any{int64(1)}, cascade: true, pre: "INSERT IGNORE INTO `dst`.`p` (`id`, `v`) VALUES (?, ?)", preArgs: []any{int64(1), "x"}},
		{table: "p", sql: "DELETE FROM `dst`.`p` WHERE `id` IN (?)", args: []any{int64(2)}, cascade: true, pre: "INSERT IGNORE INTO `dst`.`p` (`id`, `v`) VALUES (?, ?)", preArgs: []any{int64(2), "y"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("statements:\n got %#v\nwant %#v", got, want)
	}
}

// A batch cut into parts puts each row in one part only, with its last
// change in source order: parts committed in parallel cannot reorder the
// changes to one row. Batches that cannot be compacted, small batches and
// batches touching tables without transactions stay whole.
func TestBatchParts(t *testing.T) {
	a := testShape(t, tables.Table{Name: "a", Columns: []string{"id", "v"}, PK: []string{"id"}}, schema.TableColumn{Name: "id"}, schema.TableColumn{Name: "v"})
	b := testShape(t, tables.Table{Name: "b", Columns: []string{"k1", "k2", "v"}, PK: []string{"k1", "k2"}},
		schema.TableColumn{Name: "k1"}, schema.TableColumn{Name: "k2"}, schema.TableColumn{Name: "v"})
	rnd := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var acts []action
		last := map[string]action{} // row -> its last change
		for i := 0; i < 300+rnd.IntN(3000); i++ {
			var act action
			switch id := int64(rnd.IntN(400)); rnd.IntN(4) {
			case 0:
				act = a.delete([]any{id, nil}, true)
			case 1:
				act = b.upsert([]any{id, []byte("k"), int64(i)}, true)
			default:
				act = a.upsert([]any{id, int64(i)}, true)
			}
			k, _ := act.key()
			last[act.shape.name+"/"+k] = act
			acts = append(acts, act)
		}
		workers := 1 + rnd.IntN(6)
		all, parts := batchParts(acts, workers, nil)
		want := 1
		if len(all) >= parallelMin {
			want = workers
		}
		if len(parts) != want {
			t.Fatalf("%d rows over %d workers: %d parts (want %d)", len(all), workers, len(parts), want)
		}
		seen := map[string]int{}
		var joined []action
		for pi, part := range parts {
			for _, act := range part {
				k, _ := act.key()
				row := act.shape.name + "/" + k
				if p, dup := seen[row]; dup {
					t.Fatalf("row %s is in parts %d and %d", row, p, pi)
				}
				seen[row] = pi
				if !reflect.DeepEqual(act, last[row]) {
					t.Fatalf("row %s: part %d applies %+v, its last change is %+v", row, pi, act, last[row])
				}
			}
			joined = append(joined, part...)
		}
		if len(seen) != len(last) || !reflect.DeepEqual(joined, all) {
			t.Fatalf("the parts hold %d rows of %d, or not the batch in order", len(seen), len(last))
		}
	}
	p := testShape(t, tables.Table{Name: "p", Columns: []string{"id", "v"}, PK: []string{"id"}}, schema.TableColumn{Name: "id"}, schema.TableColumn{Name: "v"})
	p.cascade = true
	var big []action
	for i := 0; i < 2*parallelMin; i++ {
		big = append(big, a.upsert([]any{int64(i), int64(i)}, true))
	}
	if _, parts := batchParts(big, 4, nil); len(parts) != 4 {
		t.Fatalf("a large batch: %d parts", len(parts))
	}
	if _, parts := batchParts(append(big, p.rowDelete([]any{int64(1), "x"})), 4, nil); len(parts) != 1 {
		t.Fatal("a batch with a cascading delete was cut")
	}
	if _, parts := batchParts(big, 4, map[string]bool{"a": true}); len(parts) != 1 {
		t.Fatal("a batch changing a table without transactions was cut")
	}
	if _, ok := compact([]action{p.rowDelete([]any{int64(1), "x"})}); ok {
		t.Fatal("a lone cascading delete was reported compacted")
	}
}

// buildStatements is what the applier sends for one batch on one session:
// compacted (see compact), then runs merged (mergeRuns).
func buildStatements(acts []action, lim limits) []stmt {
	acts, _ = compact(acts)
	return mergeRuns(acts, lim)
}
