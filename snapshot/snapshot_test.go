package snapshot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/watermark"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is a fresh source schema on server 1 and a target schema name on server 2.
type fixture struct {
	src, dst     *sql.DB
	sname, tname string
}

func newFixture(t testing.TB, ddl ...string) fixture {
	t.Helper()
	var f fixture
	f.src, f.dst, f.sname, f.tname = testenv.NewPair(t, "snap_"+strings.ToLower(t.Name()))
	testenv.Schema(t, f.src, f.sname, ddl...)
	return f
}

// exec runs a statement or fails the test.
var exec = testenv.Exec

func (f fixture) copier() *Copier {
	return &Copier{Source: f.src, Target: f.dst, SourceSchema: f.sname, TargetSchema: f.tname}
}

func (f fixture) tables(t testing.TB) []tables.Table {
	t.Helper()
	ts, err := tables.Inspect(context.Background(), f.src, f.sname)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func table(t testing.TB, ts []tables.Table, name string) tables.Table {
	t.Helper()
	tb, ok := tables.Find(ts, name)
	if !ok {
		t.Fatalf("no table %s", name)
	}
	return tb
}

// dump renders every row of schema.table exactly (query's select list, ordered by order).
func dump(t testing.TB, db *sql.DB, schema, table, list, order string) []string {
	t.Helper()
	return testenv.Dump(t, db, "SELECT "+list+" FROM "+dbutil.Table(schema, table)+" ORDER BY "+order)
}

func sameRows(t testing.TB, f fixture, table, list, order string) []string {
	t.Helper()
	a := dump(t, f.src, f.sname, table, list, order)
	b := dump(t, f.dst, f.tname, table, list, order)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%s: target differs from source\nsource (%d rows):\n%s\ntarget (%d rows):\n%s", table, len(a), strings.Join(a, "\n"), len(b), strings.Join(b, "\n"))
	}
	return a
}

func count(t testing.TB, db *sql.DB, schema, table string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(schema, table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

const typedDDL = "CREATE TABLE typed (" +
	"a BIGINT NOT NULL, b VARCHAR(20) NOT NULL," +
	"txt TEXT, blb BLOB, d DATE, dt DATETIME(6), ts TIMESTAMP(6) NULL, dec1 DECIMAL(30,10)," +
	"f FLOAT, dbl DOUBLE, l1 VARCHAR(10) CHARACTER SET latin1, bits BIT(10), e ENUM('x','y','z')," +
	"PRIMARY KEY (a, b)) DEFAULT CHARSET=utf8mb4"

var typedRows = []string{
	"(9223372036854775807, 'a', 'héllo 🌍', 0x00010200ff, '2024-02-29', '2024-02-29 23:59:59.999999', '2024-03-31 01:30:00.5', 12345678901234567890.0123456789, 1.2345678, 0.1, 'été', b'1010101010', 'y')",
	"(9223372036854775807, 'b', '', X'', '1000-01-01', '1000-01-01 00:00:00.000001', NULL, -0.0000000001, 16777217, 1e300, '', b'0', 'x')",
	"(9223372036854775806, 'a', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
	"(9223372036854775806, 'B ', 'x', 0x00, '9999-12-31', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', 99999999999999999999.9999999999, 3.4028234e38, -2.2250738585072014e-308, 'ÿ', b'1111111111', 'z')",
	"(-9223372036854775808, 'z', 'a\\'b\\\\c', 0x5c27, '2000-01-01', '2000-01-01 00:00:00', '1970-01-01 00:00:01', 0, -1.17549435e-38, 1.0000000000000002, 'x', b'1', NULL)",
	"(9007199254740993, 'm', 'two^53+1', NULL, NULL, NULL, NULL, NULL, 0.3, 0.3, NULL, NULL, NULL)",
	"(9007199254740992, 'm', 'two^53', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
	"(0, '', 'zero', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
}

const typedList = "a, HEX(b), HEX(txt), HEX(blb), d, dt, ts, dec1, HEX(CAST(f AS DOUBLE)), CAST(f AS DOUBLE), dbl, HEX(l1), bits+0, e"

func TestCopyVariedTypesCompositeAndBigKeys(t *testing.T) {
	f := newFixture(t, typedDDL,
		"INSERT INTO typed VALUES "+strings.Join(typedRows, ","),
		"CREATE TABLE ubig (u BIGINT UNSIGNED PRIMARY KEY, v INT)",
		"INSERT INTO ubig VALUES (18446744073709551615, 1), (18446744073709551614, 2), (18446744073709551613, 3), "+
			"(9223372036854775808, 4), (9223372036854775807, 5), (0, 6), (9007199254740993, 7), (9007199254740992, 8)",
		"CREATE TABLE bkey (k VARBINARY(8) NOT NULL, n DECIMAL(38,0) NOT NULL, v CHAR(3), PRIMARY KEY (k, n))",
		"INSERT INTO bkey VALUES (0x00, 10000000000000000000000000000000000001, 'a'), (0x00, 10000000000000000000000000000000000000, 'b'), "+
			"(0x0000, 1, 'c'), ('', 5, 'd'), (0xff00, -99999999999999999999999999999999999999, 'e'), (0xff00, 99999999999999999999999999999999999999, 'f')",
	)
	ctx := context.Background()
	ts := f.tables(t)
	c := f.copier()
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	for _, chunkRows := range []int{1, 2, 3, 1000} {
		exec(t, f.dst, "DELETE FROM `"+f.tname+"`.typed")
		exec(t, f.dst, "DELETE FROM `"+f.tname+"`.ubig")
		exec(t, f.dst, "DELETE FROM `"+f.tname+"`.bkey")
		c.ChunkRows = chunkRows
		for _, tb := range ts {
			var saves []watermark.Mark
			w, err := c.CopyTable(ctx, tb, watermark.Mark{}, func(w watermark.Mark) error { saves = append(saves, w); return nil })
			if err != nil {
				t.Fatalf("chunk %d: %v", chunkRows, err)
			}
			n := count(t, f.src, f.sname, tb.Name)
			if !w.Done || w.Rows != n {
				t.Fatalf("chunk %d table %s: watermark %+v, want done with %d rows", chunkRows, tb.Name, w, n)
			}
			if len(saves) == 0 || !reflect.DeepEqual(saves[len(saves)-1], w) {
				t.Fatalf("chunk %d table %s: last save %+v, returned %+v", chunkRows, tb.Name, saves, w)
			}
			for i := 1; i < len(saves); i++ {
				if saves[i].Rows < saves[i-1].Rows {
					t.Fatalf("watermark went back: %+v", saves)
				}
			}
		}
		sameRows(t, f, "typed", typedColumns(), "a, b")
		sameRows(t, f, "ubig", "u, v", "u")
		sameRows(t, f, "bkey", "HEX(k), n, v", "k, n")
	}
	if got := count(t, f.dst, f.tname, "typed"); got != int64(len(typedRows)) {
		t.Fatalf("typed: %d rows on target", got)
	}
	// FLOAT must keep all its bits, not the 6 digits of its text form ("1.23457").
	var fl string
	if err := f.dst.QueryRow("SELECT CAST(f AS DOUBLE) FROM "+dbutil.Table(f.tname, "typed")+" WHERE a = ? AND b = 'a'", int64(9223372036854775807)).Scan(&fl); err != nil {
		t.Fatal(err)
	}
	if fl != "1.2345677614212036" {
		t.Fatalf("FLOAT 1.2345678 arrived as %s", fl)
	}
}

func TestCopyRangeFilter(t *testing.T) {
	f := newFixture(t,
		"CREATE TABLE r (id INT PRIMARY KEY, owner BIGINT, v VARCHAR(10))",
		"INSERT INTO r SELECT seq, seq % 50, CONCAT('v', seq) FROM seq_1_to_500",
	)
	ctx := context.Background()
	ts := f.tables(t)
	tb := table(t, ts, "r")
	lo, hi := keyspace.IntK(10), keyspace.IntK(20)
	tb.Filter = keyspace.Filter{Column: "owner", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}
	c := f.copier()
	c.ChunkRows = 7
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	var progress atomic.Int64
	c.Progress = func(table string, rows int64) { progress.Add(rows) }
	w, err := c.CopyTable(ctx, tb, watermark.Mark{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Rows != 100 || !w.Done || progress.Load() != 100 {
		t.Fatalf("watermark %+v progress %d, want 100 rows", w, progress.Load())
	}
	var bad int
	if err := f.dst.QueryRow("SELECT COUNT(*) FROM `" + f.tname + "`.r WHERE owner < 10 OR owner >= 20").Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if n := count(t, f.dst, f.tname, "r"); n != 100 || bad != 0 {
		t.Fatalf("target has %d rows, %d out of range", n, bad)
	}
	got := dump(t, f.dst, f.tname, "r", "id, owner, v", "id")
	want := dump(t, f.src, f.sname, "r", "id, owner, v", "id")
	var inRange []string
	for _, r := range want {
		var id, owner int
		fmt.Sscanf(strings.ReplaceAll(r, `"`, ""), "%d | %d", &id, &owner)
		if owner >= 10 && owner < 20 {
			inRange = append(inRange, r)
		}
	}
	if !reflect.DeepEqual(got, inRange) {
		t.Fatalf("rows in range differ: %d vs %d", len(got), len(inRange))
	}
}

var errCrash = errors.New("simulated crash")

func TestCopyResumesFromSavedWatermark(t *testing.T) {
	f := newFixture(t,
		"CREATE TABLE m (a INT NOT NULL, b INT NOT NULL, v VARCHAR(20), PRIMARY KEY (a, b))",
		"INSERT INTO m SELECT seq DIV 7, seq % 7, CONCAT('row', seq) FROM seq_1_to_3000",
	)
	ctx := context.Background()
	ts := f.tables(t)
	tb := table(t, ts, "m")
	c := f.copier()
	c.ChunkRows = 50
	c.Writers = 4
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	// Crash at the fifth save: writers may have committed later chunks already.
	var saved watermark.Mark
	saves := 0
	w, err := c.CopyTable(ctx, tb, watermark.Mark{}, func(w watermark.Mark) error {
		saves++
		if saves >= 5 {
			return errCrash // crashed: nothing more reaches the checkpoint
		}
		saved = w
		return nil
	})
	if !errors.Is(err, errCrash) {
		t.Fatalf("want the crash, got %v", err)
	}
	if !strings.Contains(err.Error(), f.sname) || !strings.Contains(err.Error(), "m") {
		t.Fatalf("error does not name schema and table: %v", err)
	}
	if !reflect.DeepEqual(w, saved) || saved.After == nil || saved.Done {
		t.Fatalf("returned %+v, last saved %+v", w, saved)
	}
	before := count(t, f.dst, f.tname, "m")
	if before < saved.Rows || before >= 3000 {
		t.Fatalf("after the crash the target has %d rows, watermark says %d", before, saved.Rows)
	}
	// Rows past the watermark already on the target are overwritten, not duplicated;
	// a target row changed since is put back to the source's value.
	idleTarget(t, f.dst)
	exec(t, f.dst, "UPDATE `"+f.tname+"`.m SET v = 'stale' ORDER BY a DESC, b DESC LIMIT 1")
	c2 := f.copier()
	c2.ChunkRows = 64
	w, err = c2.CopyTable(ctx, tb, saved, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Done || w.Rows != 3000 {
		t.Fatalf("resumed watermark %+v, want 3000 rows done", w)
	}
	sameRows(t, f, "m", "a, b, v", "a, b")
	// A done watermark copies nothing.
	if w2, err := c2.CopyTable(ctx, tb, w, func(watermark.Mark) error { t.Fatal("save called for a done table"); return nil }); err != nil || !reflect.DeepEqual(w2, w) {
		t.Fatalf("done table: %+v %v", w2, err)
	}
}

func TestCopyAllParallelAndCreateTablesIdempotent(t *testing.T) {
	f := newFixture(t,
		"CREATE TABLE parent (id INT PRIMARY KEY) ENGINE=InnoDB",
		"CREATE TABLE child (id INT PRIMARY KEY, pid INT, FOREIGN KEY (pid) REFERENCES parent (id)) ENGINE=InnoDB",
		"CREATE TABLE t3 (id BIGINT PRIMARY KEY, s VARCHAR(5))",
		"CREATE TABLE t4 (id INT PRIMARY KEY)",
		"CREATE TABLE skipped (id INT PRIMARY KEY)",
		"CREATE TABLE `we``ird nàme` (`k``ey` INT PRIMARY KEY, `v?` INT)",
		"INSERT INTO parent SELECT seq FROM seq_1_to_400",
		"INSERT INTO child SELECT seq, seq FROM seq_1_to_400",
		"INSERT INTO t3 SELECT seq, 'x' FROM seq_1_to_333",
		"INSERT INTO skipped VALUES (1)",
		"INSERT INTO `we``ird nàme` SELECT seq, seq FROM seq_1_to_10",
		"CREATE TABLE gen (id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL, s INT AS (a + 1) STORED, KEY (v))",
		"INSERT INTO gen (id, a) SELECT seq, seq FROM seq_1_to_100",
	)
	ctx := context.Background()
	ts := f.tables(t)
	c := f.copier()
	c.ChunkRows = 37
	for range 2 {
		if err := c.CreateTables(ctx, ts); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := map[string]watermark.Mark{}
	err := c.CopyAll(ctx, ts, map[string]watermark.Mark{"skipped": {Done: true}}, 3, func(table string, w watermark.Mark) error {
		mu.Lock()
		defer mu.Unlock()
		got[table] = w
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range ts {
		if tb.Name == "skipped" {
			if _, ok := got[tb.Name]; ok || count(t, f.dst, f.tname, "skipped") != 0 {
				t.Fatal("a done table was copied")
			}
			continue
		}
		n := count(t, f.src, f.sname, tb.Name)
		if w := got[tb.Name]; !w.Done || w.Rows != n || count(t, f.dst, f.tname, tb.Name) != n {
			t.Fatalf("%s: watermark %+v, want %d rows", tb.Name, w, n)
		}
	}
	sameRows(t, f, "child", "id, pid", "id")
	sameRows(t, f, "we`ird nàme", "`k``ey`, `v?`", "1")
	sameRows(t, f, "gen", "id, a, v, s", "id")

	// The first error cancels the rest and names its table.
	bad := append([]tables.Table{{Name: "nope", Columns: []string{"id"}, PK: []string{"id"}}}, ts...)
	err = c.CopyAll(ctx, bad, nil, 2, func(string, watermark.Mark) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("want an error naming the missing table, got %v", err)
	}
}

func TestCopyHonorsCancelAndThrottle(t *testing.T) {
	f := newFixture(t,
		"CREATE TABLE big (id INT PRIMARY KEY, v INT)",
		"INSERT INTO big SELECT seq, seq FROM seq_1_to_2000",
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := f.tables(t)
	c := f.copier()
	c.ChunkRows = 10
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	calls := 0
	c.Throttle = func(ctx context.Context) error {
		calls++
		if calls == 20 {
			cancel()
		}
		return ctx.Err()
	}
	w, err := c.CopyTable(ctx, table(t, ts, "big"), watermark.Mark{}, nil)
	if !errors.Is(err, context.Canceled) || w.Done {
		t.Fatalf("want a cancelled, unfinished copy: %+v %v", w, err)
	}
	if calls != 20 {
		t.Fatalf("throttle called %d times", calls)
	}
}

func TestTrackerSavesOnlyTheCommittedPrefix(t *testing.T) {
	var saves []watermark.Mark
	fail := false
	tr := newTracker(watermark.Mark{After: []string{"0"}, Rows: 5}, "t", func(w watermark.Mark) error {
		if fail {
			return errCrash
		}
		saves = append(saves, w)
		return nil
	}, nil)
	commit := func(seq int, last string) error {
		return tr.committed(batch{seq: seq, rows: 10, last: []string{last}})
	}
	for _, c := range []struct {
		seq  int
		last string
	}{{2, "30"}, {1, "20"}} {
		if err := commit(c.seq, c.last); err != nil {
			t.Fatal(err)
		}
	}
	if len(saves) != 0 {
		t.Fatalf("saved past a gap: %+v", saves)
	}
	if err := commit(0, "10"); err != nil {
		t.Fatal(err)
	}
	// A failed save keeps the last saved watermark; the next save carries the whole prefix.
	fail = true
	if err := commit(3, "40"); !errors.Is(err, errCrash) {
		t.Fatalf("want the save error, got %v", err)
	}
	if got := tr.lastSaved(); !reflect.DeepEqual(got, watermark.Mark{After: []string{"30"}, Rows: 35}) {
		t.Fatalf("last saved %+v", got)
	}
	fail = false
	if err := commit(4, "50"); err != nil {
		t.Fatal(err)
	}
	want := []watermark.Mark{{After: []string{"30"}, Rows: 35}, {After: []string{"50"}, Rows: 55}}
	if !reflect.DeepEqual(saves, want) {
		t.Fatalf("saves %+v, want %+v", saves, want)
	}
	if err := tr.finish(); err != nil || !tr.lastSaved().Done || tr.lastSaved().Rows != 55 {
		t.Fatalf("finish: %v %+v", err, tr.lastSaved())
	}
}

func TestCopySplitsWideAndLargeChunks(t *testing.T) {
	cols := make([]string, 70)
	for i := range cols {
		cols[i] = fmt.Sprintf("c%d INT", i)
	}
	f := newFixture(t,
		"CREATE TABLE wide (id INT PRIMARY KEY, "+strings.Join(cols, ", ")+")",
		"INSERT INTO wide (id, c0, c69) SELECT seq, seq, -seq FROM seq_1_to_2500",
		// 40 rows of 300 KB: more than a statement carries, and more than one chunk's byte budget.
		"CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB)",
		"INSERT INTO blobs SELECT seq, CONCAT(REPEAT(CHAR(seq), 300000), UNHEX('00ff')) FROM seq_1_to_40",
	)
	ctx := context.Background()
	ts := f.tables(t)
	c := f.copier()
	c.ChunkRows = 1200 // 1200 rows × 71 columns: more placeholders than one statement takes
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	// Both ways of writing: multi-row INSERTs (split by the limits) and LOAD DATA.
	for _, insert := range []bool{true, false} {
		c.NoLoadData = insert
		for _, tb := range ts {
			exec(t, f.dst, "DELETE FROM "+dbutil.Table(f.tname, tb.Name))
			w, err := c.CopyTable(ctx, tb, watermark.Mark{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := count(t, f.src, f.sname, tb.Name); !w.Done || w.Rows != n {
				t.Fatalf("%s: %+v, want %d rows", tb.Name, w, n)
			}
		}
		sameRows(t, f, "wide", "id, c0, c1, c69", "id")
		sameRows(t, f, "blobs", "id, SHA2(b, 256), LENGTH(b)", "id")
	}
}

func TestRowsPerStmt(t *testing.T) {
	for _, c := range []struct {
		rows, ncols int
		bytes       int64
		want        int
	}{
		{5000, 4, 1_100_000, 5000}, // one statement
		{5000, 4, 5_000_000, 1667}, // 3 statements by size
		{1200, 71, 10_000, 600},    // 2 statements by placeholders (923 rows each at most)
		{40, 2, 12_000_000, 7},     // big rows
		{1, 2, 50_000_000, 1},      // one huge row
		{16383, 4, 100, 16383},     // 65532 placeholders: one statement
		{16384, 4, 100, 8192},      // one more row: two
	} {
		got := rowsPerStmt(batch{rows: c.rows, bytes: c.bytes}, c.ncols, stmtBytes)
		if got != c.want {
			t.Errorf("rowsPerStmt(%d rows, %d cols, %d bytes) = %d, want %d", c.rows, c.ncols, c.bytes, got, c.want)
		}
	}
	// A small max_allowed_packet makes statements smaller.
	if got := rowsPerStmt(batch{rows: 5000, bytes: 1_100_000}, 4, 512<<10); got != 1667 {
		t.Errorf("with a 1 MiB packet: %d rows per statement, want 1667", got)
	}
}

// typedColumns is typedList for the flavor under test: MySQL's HEX of a
// DOUBLE goes through BIGINT and overflows, so there the value alone compares.
func typedColumns() string {
	if testenv.MySQL() {
		return strings.Replace(typedList, "HEX(CAST(f AS DOUBLE)), ", "", 1)
	}
	return typedList
}

// idleTarget waits (at most 10 s) until no other transaction runs on db: a
// crashed copy's writers were cut off mid-chunk, and the server finishes or
// rolls back what it had already read of their chunks on its own time (seen:
// the next statement deadlocked with such a chunk).
func idleTarget(t *testing.T, db *sql.DB) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id <> CONNECTION_ID()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Log("other transactions still running on the target after 10 s")
}

// Two writers into MySQL, three into MariaDB, unless the caller says how many.
func TestWritersByTargetFlavor(t *testing.T) {
	for _, tc := range []struct {
		set   int
		mysql bool
		want  int
	}{{0, true, 2}, {0, false, 3}, {5, true, 5}, {1, false, 1}} {
		if got := (&Copier{Writers: tc.set}).writers(tc.mysql); got != tc.want {
			t.Errorf("Writers %d, MySQL %v: %d writers, want %d", tc.set, tc.mysql, got, tc.want)
		}
	}
}
