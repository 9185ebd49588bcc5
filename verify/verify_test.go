package verify

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/watermark"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// pair is the same schema, built by the same statements, on servers 1 and 2.
type pair struct {
	src, dst     *sql.DB
	sname, tname string
}

func newPair(t testing.TB, stmts ...string) pair {
	t.Helper()
	var p pair
	p.src, p.dst, p.sname, p.tname = testenv.NewPair(t, "verify")
	testenv.Schema(t, p.src, p.sname, stmts...)
	testenv.Schema(t, p.dst, p.tname, stmts...)
	return p
}

// run runs a statement or fails the test.
var run = testenv.Exec

func (p pair) verifier(chunkRows int) *Verifier {
	return &Verifier{Source: p.src, Target: p.dst, SourceSchema: p.sname, TargetSchema: p.tname, ChunkRows: chunkRows}
}

func (p pair) table(t testing.TB, name string) tables.Table {
	t.Helper()
	ts, err := tables.Inspect(context.Background(), p.src, p.sname)
	if err != nil {
		t.Fatal(err)
	}
	tb, ok := tables.Find(ts, name)
	if !ok {
		t.Fatalf("no table %s", name)
	}
	return tb
}

// inChunk reports whether key k (integers) is in (Lo, Hi].
func inChunk(c Chunk, k ...int64) bool {
	cmp := func(b []string) int {
		for i, s := range b {
			var v int64
			fmt.Sscan(s, &v)
			if k[i] != v {
				if k[i] < v {
					return -1
				}
				return 1
			}
		}
		return 0
	}
	return (c.Lo == nil || cmp(c.Lo) > 0) && (c.Hi == nil || cmp(c.Hi) <= 0)
}

const ordersDDL = "CREATE TABLE orders (cust BIGINT NOT NULL, n INT NOT NULL, note VARCHAR(40), amount DECIMAL(12,2), f FLOAT, at DATETIME(6), PRIMARY KEY (cust, n))"
const ordersRows = "INSERT INTO orders SELECT seq DIV 10, seq % 10, IF(seq % 7 = 0, NULL, CONCAT('note ', seq)), seq / 100, seq / 3, '2024-01-01 00:00:00' + INTERVAL seq SECOND FROM seq_1_to_1000"

func TestIdenticalThenChangedRowReportsItsChunk(t *testing.T) {
	p := newPair(t, ordersDDL, ordersRows)
	ctx := context.Background()
	tb := p.table(t, "orders")
	v := p.verifier(64)
	var progress int64
	v.Progress = func(table string, rows int64) { progress += rows }
	res, err := v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 || res.Rows != 1000 || progress != 1000 || res.Chunks < 1000/64 || res.Tables != 1 {
		t.Fatalf("identical tables: %+v (progress %d)", res, progress)
	}

	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "orders")+" SET note = 'changed' WHERE cust = 50 AND n = 3")
	res, err = v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 1 {
		t.Fatalf("want one mismatching chunk, got %+v", res.Mismatches)
	}
	c := res.Mismatches[0]
	if !inChunk(c, 50, 3) || c.Lo == nil || c.Hi == nil || c.SourceRows != c.TargetRows || c.SourceSum == c.TargetSum || c.Table != "orders" {
		t.Fatalf("mismatch does not locate (50, 3): %+v", c)
	}
	if c.SourceRows != 64 {
		t.Fatalf("chunk has %d source rows, want 64", c.SourceRows)
	}

	// A FLOAT change below its 6 printed digits is still seen.
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "orders")+" SET note = 'note 503' WHERE cust = 50 AND n = 3")
	run(t, p.src, "UPDATE "+dbutil.Table(p.sname, "orders")+" SET f = 1.2345678 WHERE cust = 2 AND n = 0")
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "orders")+" SET f = 1.2345679 WHERE cust = 2 AND n = 0")
	res, err = v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 1 || !inChunk(res.Mismatches[0], 2, 0) || res.Mismatches[0].Lo != nil {
		t.Fatalf("FLOAT difference: %+v", res.Mismatches)
	}
}

func TestMissingAndExtraRows(t *testing.T) {
	p := newPair(t, ordersDDL, ordersRows)
	ctx := context.Background()
	run(t, p.dst, "DELETE FROM "+dbutil.Table(p.tname, "orders")+" WHERE cust = 20 AND n = 5")
	run(t, p.dst, "INSERT INTO "+dbutil.Table(p.tname, "orders")+" (cust, n) VALUES (5000, 1)")  // beyond the source's last key
	run(t, p.dst, "INSERT INTO "+dbutil.Table(p.tname, "orders")+" (cust, n) VALUES (-5000, 1)") // before its first
	res, err := p.verifier(100).Table(ctx, p.table(t, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 3 {
		t.Fatalf("want 3 mismatching chunks, got %+v", res.Mismatches)
	}
	first, mid, last := res.Mismatches[0], res.Mismatches[1], res.Mismatches[2]
	if first.Lo != nil || first.TargetRows != first.SourceRows+1 {
		t.Fatalf("row before the first key: %+v", first)
	}
	if !inChunk(mid, 20, 5) || mid.TargetRows != mid.SourceRows-1 {
		t.Fatalf("deleted row: %+v", mid)
	}
	if last.Hi != nil || last.SourceRows != 0 || last.TargetRows != 1 {
		t.Fatalf("row beyond the end: %+v", last)
	}
}

func TestNullIsNotEmptyString(t *testing.T) {
	p := newPair(t,
		"CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(5), b VARCHAR(5), bin VARBINARY(4))",
		"INSERT INTO t VALUES (1, NULL, 'x', NULL), (2, '', 'x', ''), (3, 'a', NULL, 0x00)",
	)
	ctx := context.Background()
	v := p.verifier(10)
	tb := p.table(t, "t")
	if res, err := v.Table(ctx, tb); err != nil || len(res.Mismatches) != 0 {
		t.Fatalf("identical: %+v %v", res, err)
	}
	for _, fix := range [][2]string{
		{"UPDATE %s SET a = '' WHERE id = 1", "UPDATE %s SET a = NULL WHERE id = 1"},
		{"UPDATE %s SET a = NULL WHERE id = 2", "UPDATE %s SET a = '' WHERE id = 2"},
		// 'a', NULL and NULL, 'a' concatenate alike: the markers tell them apart.
		{"UPDATE %s SET a = NULL, b = 'a' WHERE id = 3", "UPDATE %s SET a = 'a', b = NULL WHERE id = 3"},
		{"UPDATE %s SET bin = '' WHERE id = 1", "UPDATE %s SET bin = NULL WHERE id = 1"},
	} {
		run(t, p.dst, fmt.Sprintf(fix[0], dbutil.Table(p.tname, "t")))
		res, err := v.Table(ctx, tb)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Mismatches) != 1 {
			t.Fatalf("%s: not detected: %+v", fix[0], res)
		}
		run(t, p.dst, fmt.Sprintf(fix[1], dbutil.Table(p.tname, "t")))
	}
}

func TestFilterLimitsTheScope(t *testing.T) {
	p := newPair(t,
		"CREATE TABLE u (id INT PRIMARY KEY, owner INT, v VARCHAR(10))",
		"INSERT INTO u SELECT seq, seq % 100, 'v' FROM seq_1_to_2000",
	)
	ctx := context.Background()
	tb := p.table(t, "u")
	lo, hi := keyspace.IntK(10), keyspace.IntK(20)
	tb.Filter = keyspace.Filter{Column: "owner", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}
	// Out of scope: changed, deleted, added on the target. None of it counts.
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "u")+" SET v = 'other' WHERE owner = 5")
	run(t, p.dst, "DELETE FROM "+dbutil.Table(p.tname, "u")+" WHERE owner = 50")
	run(t, p.dst, "INSERT INTO "+dbutil.Table(p.tname, "u")+" VALUES (99999, 99, 'x')")
	v := p.verifier(37)
	res, err := v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 || res.Rows != 200 {
		t.Fatalf("out-of-scope differences reported, or wrong scope: %+v", res)
	}
	// In scope: reported, including a row in scope added beyond the end.
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "u")+" SET v = 'other' WHERE id = 1015")
	run(t, p.dst, "INSERT INTO "+dbutil.Table(p.tname, "u")+" VALUES (99998, 15, 'x')")
	res, err = v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 2 || !inChunk(res.Mismatches[0], 1015) || res.Mismatches[1].Hi != nil {
		t.Fatalf("in-scope differences: %+v", res.Mismatches)
	}

	// A hash-arc filter works the same way (it hashes inside the server).
	testenv.Get(t).NeedMD5(t)
	tb.Filter = keyspace.Filter{Column: "id", Arcs: []keyspace.Arc{{After: "40000000000000000000000000000000", Upto: "c0000000000000000000000000000000"}}}
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "u")+" SET v = 'v' WHERE id = 1015")
	run(t, p.dst, "DELETE FROM "+dbutil.Table(p.tname, "u")+" WHERE id = 99998")
	res, err = v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	// Rows with owner 50 were deleted on the target: exactly those on the arc are missing.
	var onArc, missing, reported int64
	for id := 1; id <= 2000; id++ {
		if ok, _ := tb.Filter.Match(int64(id)); ok {
			onArc++
			if id%100 == 50 {
				missing++
			}
		}
	}
	for _, m := range res.Mismatches {
		reported += m.SourceRows - m.TargetRows
	}
	if res.Rows != onArc || missing == 0 || reported != missing {
		t.Fatalf("arc filter: %d rows checked (want %d), %d missing rows reported (want %d)", res.Rows, onArc, reported, missing)
	}
}

func TestSettleFixesTransientMismatch(t *testing.T) {
	p := newPair(t,
		"CREATE TABLE s (id INT PRIMARY KEY, v INT)",
		"INSERT INTO s SELECT seq, seq FROM seq_1_to_500",
	)
	ctx := context.Background()
	tb := p.table(t, "s")
	// The target lags: the tail has not applied the last update yet. Settle applies it.
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "s")+" SET v = 0 WHERE id = 250")
	settles := 0
	v := p.verifier(100)
	v.Settle = func(ctx context.Context) error {
		settles++
		_, err := p.dst.ExecContext(ctx, "UPDATE "+dbutil.Table(p.tname, "s")+" SET v = 250 WHERE id = 250")
		return err
	}
	res, err := v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 || settles != 1 {
		t.Fatalf("transient mismatch: %+v, settle called %d times", res, settles)
	}

	// A lasting mismatch is re-checked Retries times, then reported.
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "s")+" SET v = 0 WHERE id = 7")
	settles = 0
	v.Settle = func(context.Context) error { settles++; return nil }
	v.Retries = 3
	res, err = v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 1 || settles != 3 || !inChunk(res.Mismatches[0], 7) {
		t.Fatalf("lasting mismatch: %+v, settle called %d times", res, settles)
	}
	// Default retries with Settle: 5.
	v.Retries = 0
	settles = 0
	if _, err := v.Table(ctx, tb); err != nil || settles != 5 {
		t.Fatalf("default retries: settle called %d times, %v", settles, err)
	}
	// A Settle error stops the run and names the table.
	boom := errors.New("tail died")
	v.Settle = func(context.Context) error { return boom }
	if _, err := v.Table(ctx, tb); !errors.Is(err, boom) || !strings.Contains(err.Error(), p.sname+".s") {
		t.Fatalf("settle error: %v", err)
	}
}

func TestAllAndKeyTypes(t *testing.T) {
	p := newPair(t,
		"CREATE TABLE a (u BIGINT UNSIGNED PRIMARY KEY, v TEXT)",
		"INSERT INTO a VALUES (18446744073709551615, 'max'), (18446744073709551614, 'max-1'), (9007199254740993, 'x'), (0, 'zero')",
		"CREATE TABLE b (k VARBINARY(8) NOT NULL, d DECIMAL(40,0) NOT NULL, dt DATETIME(6) NOT NULL, v BLOB, PRIMARY KEY (k, d, dt))",
		"INSERT INTO b VALUES (0x00, 1, '2020-01-01', 0x00ff), (0x00, 10000000000000000000000000000000000001, '2020-01-01', NULL), (0x00, 10000000000000000000000000000000000000, '2020-01-01', ''), ('', 0, '1000-01-01 00:00:00.000001', 'x'), (0xff, -5, '2020-01-01 00:00:00.5', 'y')",
		"CREATE TABLE c (id INT PRIMARY KEY)",
	)
	ctx := context.Background()
	ts, err := tables.Inspect(ctx, p.src, p.sname)
	if err != nil {
		t.Fatal(err)
	}
	v := p.verifier(1)
	v.Threads = 1
	res, err := v.All(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	// Chunks of one row: one per row, plus each table's open-ended last
	// one, plus the empty chunk a's stepped bounds try after key 0 before
	// the gap sends them back to chunk.Upper (stride.go). More threads
	// learn the step from a chunk further back: other chunks, same rows.
	if res.Tables != 3 || res.Rows != 9 || res.Chunks != 9+3+1 || len(res.Mismatches) != 0 {
		t.Fatalf("all: %+v", res)
	}
	v.Threads = 4
	if res, err := v.All(ctx, ts); err != nil || res.Tables != 3 || res.Rows != 9 || res.Chunks < 9+3 || len(res.Mismatches) != 0 {
		t.Fatalf("all, 4 threads: %+v %v", res, err)
	}
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "b")+" SET v = 'z' WHERE k = 0x00 AND d = 10000000000000000000000000000000000000")
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "a")+" SET v = 'z' WHERE u = 18446744073709551614")
	res, err = v.All(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	want := []Chunk{
		{Range: watermark.Range{Table: "a", Lo: []string{"9007199254740993"}, Hi: []string{"18446744073709551614"}}, SourceRows: 1, TargetRows: 1},
		{Range: watermark.Range{Table: "b", Lo: []string{"0x00", "1", "2020-01-01 00:00:00.000000"}, Hi: []string{"0x00", "10000000000000000000000000000000000000", "2020-01-01 00:00:00.000000"}}, SourceRows: 1, TargetRows: 1},
	}
	for i := range res.Mismatches {
		res.Mismatches[i].SourceSum, res.Mismatches[i].TargetSum = "", ""
	}
	if !reflect.DeepEqual(res.Mismatches, want) {
		t.Fatalf("mismatches\n got %+v\nwant %+v", res.Mismatches, want)
	}
	// A table missing on the target is an error naming it.
	run(t, p.dst, "DROP TABLE "+dbutil.Table(p.tname, "c"))
	if _, err := v.All(ctx, ts); err == nil || !strings.Contains(err.Error(), p.tname+".c") {
		t.Fatalf("missing target table: %v", err)
	}
}

// TestHashSeesEachKindOfChange changes one thing at a time on the target:
// each column, NULL for an empty string, a value moved to the next column, and the same
// change in two rows of the same length (a CRC is affine: XORing the rows'
// CRCs would miss that; see RowsChecksumSQL).
func TestHashSeesEachKindOfChange(t *testing.T) {
	const ddl = "CREATE TABLE h (id INT PRIMARY KEY, a VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci, b VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NOT NULL, n BIGINT, d DECIMAL(10,2), f FLOAT, g DOUBLE, at DATETIME, e ENUM('x','y'), bin VARBINARY(8), bits BIT(8))"
	const rows = "INSERT INTO h VALUES (1, 'a1', '', 10, 1.50, 1.5, 2.5, '2024-01-01 10:00:00', 'x', 0x01ff, b'101')," +
		" (2, 'a2', 'b', 20, 2.50, 2.5, 3.5, '2024-03-07 10:00:00', 'y', 0x0304, b'110'), (3, NULL, 'c', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
	p := newPair(t, ddl, rows)
	ctx := context.Background()
	v := p.verifier(10)
	tb := p.table(t, "h")
	h := dbutil.Table(p.tname, "h")
	check := func(what string, want int) {
		t.Helper()
		res, err := v.Table(ctx, tb)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(res.Mismatches) != want || res.Rows != 3 {
			t.Fatalf("%s: want %d mismatching chunks, got %+v", what, want, res)
		}
	}
	check("identical", 0)
	for _, change := range []string{
		"UPDATE %s SET id = 4 WHERE id = 3",
		"UPDATE %s SET a = 'a9' WHERE id = 1",
		"UPDATE %s SET b = 'B' WHERE id = 2",
		"UPDATE %s SET n = 11 WHERE id = 1",
		"UPDATE %s SET d = 1.51 WHERE id = 1",
		"UPDATE %s SET f = 1.5000001 WHERE id = 1",
		"UPDATE %s SET g = 2.5000000000000004 WHERE id = 1",
		"UPDATE %s SET at = '2024-01-01 10:00:01' WHERE id = 1",
		"UPDATE %s SET e = 'y' WHERE id = 1",
		"UPDATE %s SET bin = 0x01fe WHERE id = 1", // not valid UTF-8, next to two collations of one character set
		"UPDATE %s SET bits = b'100' WHERE id = 1",
		"UPDATE %s SET n = 0 WHERE id = 3",  // NULL to a value
		"UPDATE %s SET a = '' WHERE id = 3", // NULL to ''
		"UPDATE %s SET bin = '' WHERE id = 3",
		"UPDATE %s SET a = '', b = 'a1' WHERE id = 1",          // a value moved to the next column
		"UPDATE %s SET a = NULL, b = 'a1' WHERE id = 1",        // …leaving NULL
		"UPDATE %s SET at = at + INTERVAL 1 HOUR WHERE id < 3", // the same bytes changed in two rows of one length
	} {
		run(t, p.dst, fmt.Sprintf(change, h))
		check(change, 1)
		run(t, p.dst, "DELETE FROM "+h)
		run(t, p.dst, strings.Replace(rows, "INSERT INTO h", "INSERT INTO "+h, 1))
	}
	check("restored", 0)

	// b is NOT NULL on the source only: its marker is kept, so the target's
	// NULL is not taken for the source's ''.
	run(t, p.dst, "ALTER TABLE "+h+" MODIFY b VARCHAR(20) NULL")
	check("b nullable on the target", 0)
	run(t, p.dst, "UPDATE "+h+" SET b = NULL WHERE id = 1")
	check("NULL for '' in a column NOT NULL on the source", 1)
}
