package verify

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/tables"
)

// named flattens the rows a result names: "key kind columns" per row.
func named(res Result) []string {
	var out []string
	for _, m := range res.Mismatches {
		for _, r := range m.Rows {
			out = append(out, strings.Join(r.Key, ",")+" "+r.Kind+" "+strings.Join(r.Columns, ","))
		}
	}
	slices.Sort(out)
	return out
}

func TestNarrowNamesRowsAndRepairFixesThem(t *testing.T) {
	p := newPair(t, ordersDDL, ordersRows)
	ctx := context.Background()
	tb := p.table(t, "orders")
	dst := dbutil.Table(p.tname, "orders")
	run(t, p.dst, "DELETE FROM "+dst+" WHERE cust = 20 AND n = 5")
	run(t, p.dst, "UPDATE "+dst+" SET note = 'changed' WHERE cust = 50 AND n = 3")
	run(t, p.dst, "UPDATE "+dst+" SET amount = NULL, f = 0 WHERE cust = 51 AND n = 4")
	run(t, p.dst, "INSERT INTO "+dst+" (cust, n) VALUES (-5000, 1)")
	// More extra rows past the source's last key than a chunk holds: the
	// last chunk is narrowed in several sub-ranges of the target's keys.
	testenv.InSchema(t, p.dst, p.tname, "INSERT INTO orders (cust, n, note) SELECT 6000 + seq, 0, 'extra' FROM seq_1_to_250")
	v := p.verifier(100)
	v.Narrow = true
	v.MaxRows = 300
	res, err := v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-5000,1 target_only ", "20,5 source_only ", "50,3 differs note", "51,4 differs amount,f"}
	for i := 1; i <= 250; i++ {
		want = append(want, fmt.Sprintf("%d,0 target_only ", 6000+i))
	}
	slices.Sort(want)
	if got := named(res); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows named:\n got %q\nwant %q", got, want)
	}
	for _, m := range res.Mismatches {
		if !reflect.DeepEqual(m.KeyColumns, []string{"cust", "n"}) {
			t.Fatalf("key columns: %+v", m)
		}
	}

	// A smaller listing cap counts what it leaves out.
	v.MaxRows = 10
	capped, err := v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	last := capped.Mismatches[len(capped.Mismatches)-1]
	if len(last.Rows) != 10 || last.MoreRows != 240 {
		t.Fatalf("capped listing: %d rows, %d more", len(last.Rows), last.MoreRows)
	}

	var fixed Repaired
	for _, m := range res.Mismatches {
		r, err := v.Repair(ctx, tb, []Chunk{m})
		if err != nil {
			t.Fatal(err)
		}
		fixed.Written += r.Written
		fixed.Deleted += r.Deleted
	}
	if fixed != (Repaired{Written: 3, Deleted: 251}) {
		t.Fatalf("repaired %+v, want 3 written and 251 deleted", fixed)
	}
	again, err := v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Mismatches) != 0 {
		t.Fatalf("after repair: %+v", again.Mismatches)
	}
	if got := noteAmount(t, p, "SELECT note, amount FROM %s WHERE cust = 51 AND n = 4"); got != "note 514 5.14" {
		t.Fatalf("repaired row: %q", got)
	}
}

func noteAmount(t *testing.T, p pair, q string) string {
	t.Helper()
	var note, amount string
	if err := p.dst.QueryRow(fmt.Sprintf(q, dbutil.Table(p.tname, "orders"))).Scan(&note, &amount); err != nil {
		t.Fatal(err)
	}
	return note + " " + amount
}

// Repair writes only rows in scope: rows outside the filter stay as they are
// on the target, and the target's generated column is computed, not written.
func TestRepairKeepsToTheFilter(t *testing.T) {
	p := newPair(t,
		"CREATE TABLE u (id INT PRIMARY KEY, owner INT, v VARCHAR(10), b BIT(8), y YEAR, g INT AS (id * 2) VIRTUAL)",
		"INSERT INTO u (id, owner, v, b, y) SELECT seq, seq % 100, 'v', seq % 256, 2000 + seq % 20 FROM seq_1_to_2000",
	)
	ctx := context.Background()
	tb := p.table(t, "u")
	lo, hi := keyspace.IntK(10), keyspace.IntK(20)
	tb.Filter = keyspace.Filter{Column: "owner", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}
	dst := dbutil.Table(p.tname, "u")
	run(t, p.dst, "UPDATE "+dst+" SET v = 'other' WHERE owner = 5")             // out of scope
	run(t, p.dst, "UPDATE "+dst+" SET v = 'other', b = 0 WHERE id = 1015")      // in scope
	run(t, p.dst, "DELETE FROM "+dst+" WHERE id IN (1016, 1050)")               // one in scope, one not
	run(t, p.dst, "INSERT INTO "+dst+" (id, owner, v) VALUES (99998, 15, 'x')") // in scope, target only
	v := p.verifier(50)
	v.Narrow = true
	res, err := v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1015 differs v,b", "1016 source_only ", "99998 target_only "}
	if got := named(res); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows named: %q, want %q", got, want)
	}
	if _, err := v.Repair(ctx, tb, res.Mismatches); err != nil {
		t.Fatal(err)
	}
	if again, err := v.Table(ctx, tb); err != nil || len(again.Mismatches) != 0 {
		t.Fatalf("after repair: %+v %v", again, err)
	}
	var other int
	if err := p.dst.QueryRow("SELECT COUNT(*) FROM " + dst + " WHERE owner = 5 AND v = 'other'").Scan(&other); err != nil {
		t.Fatal(err)
	}
	var has1050 int
	if err := p.dst.QueryRow("SELECT COUNT(*) FROM " + dst + " WHERE id = 1050").Scan(&has1050); err != nil {
		t.Fatal(err)
	}
	if other != 20 || has1050 != 0 {
		t.Fatalf("out-of-scope rows were touched: %d of 20 still changed, row 1050 present %d", other, has1050)
	}
}

// A verification interrupted after some chunks continues from its
// checkpoint: the resumed run compares only the rest, and its result is the
// full run's (each chunk counted once, every differing chunk kept).
func TestResumeFromCheckpoint(t *testing.T) {
	p := newPair(t, ordersDDL, ordersRows, "CREATE TABLE small (id INT PRIMARY KEY, v INT)", "INSERT INTO small VALUES (1, 1), (2, 2)")
	ctx := context.Background()
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "orders")+" SET note = 'x' WHERE cust = 5 AND n = 1")
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "orders")+" SET note = 'x' WHERE cust = 95 AND n = 1")
	run(t, p.dst, "DELETE FROM "+dbutil.Table(p.tname, "small")+" WHERE id = 2")
	ts := []tables.Table{p.table(t, "orders"), p.table(t, "small")}
	full, err := p.verifier(100).All(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}

	stop := errors.New("interrupted")
	var last Checkpoint
	v := p.verifier(100)
	n := 0
	v.Checkpoint = func(cp Checkpoint) error {
		if n++; n == 4 {
			return stop
		}
		last = cp
		return nil
	}
	if _, err := v.All(ctx, ts); !errors.Is(err, stop) {
		t.Fatalf("interrupted run: %v", err)
	}
	if last.Table != "orders" || len(last.Partial.Mismatches) != 1 {
		t.Fatalf("checkpoint after 3 chunks: %+v", last)
	}
	var chunks int
	v = p.verifier(100)
	v.From = &last
	v.Progress = func(string, int64) { chunks++ }
	res, err := v.All(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res, full) {
		t.Fatalf("resumed result differs from a full run:\n got %+v\nwant %+v", res, full)
	}
	if chunks != full.Chunks-3 {
		t.Fatalf("resumed run compared %d chunks, want the %d left", chunks, full.Chunks-3)
	}
}

// Rows whose unique values are swapped on the copy are repaired: the
// repair writes as the apply does (REPLACE), so the row holding a value
// under another key goes and comes back from the source in its turn.
func TestRepairSwappedUniqueValues(t *testing.T) {
	p := newPair(t, "CREATE TABLE u (id INT PRIMARY KEY, email VARCHAR(20) NOT NULL, UNIQUE KEY email (email))",
		"INSERT INTO u VALUES (1, 'a'), (2, 'b'), (3, 'c')")
	ctx := context.Background()
	dst := dbutil.Table(p.tname, "u")
	run(t, p.dst, "UPDATE "+dst+" SET email = 'x' WHERE id = 1")
	run(t, p.dst, "UPDATE "+dst+" SET email = 'a' WHERE id = 2")
	run(t, p.dst, "UPDATE "+dst+" SET email = 'b' WHERE id = 1")
	tb := p.table(t, "u")
	v := p.verifier(10)
	v.Narrow = true
	res, err := v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if got := named(res); !reflect.DeepEqual(got, []string{"1 differs email", "2 differs email"}) {
		t.Fatalf("rows named: %q", got)
	}
	if _, err := v.Repair(ctx, tb, res.Mismatches); err != nil {
		t.Fatal(err)
	}
	if again, err := v.Table(ctx, tb); err != nil || len(again.Mismatches) != 0 {
		t.Fatalf("after repair: %+v %v", again, err)
	}
}
