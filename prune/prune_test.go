package prune

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/watermark"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newSchema creates a schema on server 1 and runs stmts in it.
func newSchema(t testing.TB, stmts ...string) (*sql.DB, string) {
	t.Helper()
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	schema := testenv.UniqueName("prune")
	testenv.Schema(t, db, schema, stmts...)
	return db, schema
}

// run runs a statement or fails the test.
var run = testenv.Exec

func table(t testing.TB, db *sql.DB, schema, name string) tables.Table {
	t.Helper()
	ts, err := tables.Inspect(context.Background(), db, schema)
	if err != nil {
		t.Fatal(err)
	}
	tb, ok := tables.Find(ts, name)
	if !ok {
		t.Fatalf("no table %s", name)
	}
	return tb
}

// ids returns the sorted ids left in schema.table.
func ids(t testing.TB, db *sql.DB, schema, table string) []int64 {
	t.Helper()
	var out []int64
	var id int64
	err := dbutil.ScanEach(context.Background(), db, "SELECT id FROM "+dbutil.Table(schema, table)+" ORDER BY id + 0", nil,
		[]any{&id}, func() error { out = append(out, id); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func intRange(lo, hi int64) keyspace.Range {
	l, h := keyspace.IntK(lo), keyspace.IntK(hi)
	return keyspace.Range{Lo: &l, Hi: &h}
}

// notOwned is the filter of a shard that owns col in [lo, hi): the rows a
// prune deletes.
func notOwned(col string, lo, hi int64) keyspace.Filter {
	return keyspace.Filter{Column: col, Ranges: []keyspace.Range{intRange(lo, hi)}, Negate: true}
}

const usersDDL = "CREATE TABLE users (id INT PRIMARY KEY, owner BIGINT NULL, v VARCHAR(10))"

// 3000 rows: owner = id % 300, except every 97th row, whose owner is NULL.
const usersRows = "INSERT INTO users SELECT seq, IF(seq % 97 = 0, NULL, seq % 300), 'v' FROM seq_1_to_3000"

func TestNegatedRangeLeavesExactlyTheOwnedRows(t *testing.T) {
	db, schema := newSchema(t, usersDDL, usersRows)
	ctx := context.Background()
	tb := table(t, db, schema, "users")
	owned := keyspace.Filter{Column: "owner", Ranges: []keyspace.Range{intRange(100, 200)}}
	tb.Filter = owned
	tb.Filter.Negate = true
	p := &Pruner{DB: db, Schema: schema, ChunkRows: 64}
	want, err := p.Count(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	var expect int64
	var keep []int64
	for id := int64(1); id <= 3000; id++ {
		if id%97 == 0 || (id%300 >= 100 && id%300 < 200) {
			keep = append(keep, id) // NULL owners belong to no mapping: kept
		} else {
			expect++
		}
	}
	if want != expect {
		t.Fatalf("Count = %d, want %d", want, expect)
	}
	if left := ids(t, db, schema, "users"); len(left) != 3000 {
		t.Fatalf("Count changed the table: %d rows", len(left))
	}
	var saves []watermark.Mark
	var progress int64
	p.Progress = func(table string, d int64) { progress += d }
	w, err := p.Table(ctx, tb, watermark.Mark{}, func(w watermark.Mark) error { saves = append(saves, w); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !w.Done || w.Rows != expect || progress != expect {
		t.Fatalf("watermark %+v, progress %d, want %d deleted", w, progress, expect)
	}
	if len(saves) < int(expect/64) || !saves[len(saves)-1].Done {
		t.Fatalf("%d saves, last %+v", len(saves), saves[len(saves)-1])
	}
	if got := ids(t, db, schema, "users"); fmt.Sprint(got) != fmt.Sprint(keep) {
		t.Fatalf("left %d rows, want %d", len(got), len(keep))
	}
	// Nothing left to prune: a second run deletes nothing.
	if w, err := p.Table(ctx, tb, watermark.Mark{}, nil); err != nil || w.Rows != 0 || !w.Done {
		t.Fatalf("second run: %+v %v", w, err)
	}
}

func TestHashArcFilterWithoutQuadraticScans(t *testing.T) {
	testenv.Get(t).NeedMD5(t) // the arc filter hashes inside the server
	db, schema := newSchema(t,
		"CREATE TABLE h (a INT NOT NULL, b VARCHAR(8) NOT NULL, id INT NOT NULL, PRIMARY KEY (a, b))",
		"INSERT INTO h SELECT seq DIV 3, CONCAT('k', seq % 3), seq FROM seq_1_to_6000",
	)
	ctx := context.Background()
	tb := table(t, db, schema, "h")
	// Keep a wrapping arc of the ring; MD5(id) has no index, so every chunk filters rows by reading them.
	tb.Filter = keyspace.Filter{Column: "id", Arcs: []keyspace.Arc{{After: "c0000000000000000000000000000000", Upto: "40000000000000000000000000000000"}}, Negate: true}
	var keep []int64
	var del int64
	for id := int64(1); id <= 6000; id++ {
		if gone, _ := tb.Filter.Match(id); gone {
			del++
		} else {
			keep = append(keep, id)
		}
	}
	p := &Pruner{DB: db, Schema: schema, ChunkRows: 20}
	if n, err := p.Count(ctx, tb); err != nil || n != del {
		t.Fatalf("Count = %d (%v), want %d", n, err, del)
	}
	before := handlerReads(t, db)
	w, err := p.Table(ctx, tb, watermark.Mark{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reads := handlerReads(t, db) - before
	if !w.Done || w.Rows != del {
		t.Fatalf("watermark %+v, want %d deleted", w, del)
	}
	got := ids(t, db, schema, "h")
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if fmt.Sprint(got) != fmt.Sprint(keep) {
		t.Fatalf("left %d rows, want the %d on the arc", len(got), len(keep))
	}
	// 200 chunks or so: a scan from the table start per chunk would read ~ chunks × rows / 2 ≈ 450k rows.
	if reads > 10*6000 {
		t.Fatalf("%d handler reads to prune 6000 rows: chunks rescan the table", reads)
	}
	t.Logf("%d chunks, %d handler reads for 6000 rows", del/20+1, reads)
}

// handlerReads sums the server's Handler_read_* counters.
func handlerReads(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var sum, v int64
	var name string
	err := dbutil.ScanEach(context.Background(), db, "SHOW GLOBAL STATUS LIKE 'Handler_read%'", nil,
		[]any{&name, &v}, func() error { sum += v; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestResumeFromAMidWatermark(t *testing.T) {
	db, schema := newSchema(t, usersDDL, usersRows)
	ctx := context.Background()
	tb := table(t, db, schema, "users")
	tb.Filter = notOwned("owner", 0, 150)
	p := &Pruner{DB: db, Schema: schema, ChunkRows: 100}
	total, err := p.Count(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	crash := errors.New("crash")
	var saved watermark.Mark
	saves := 0
	w, err := p.Table(ctx, tb, watermark.Mark{}, func(w watermark.Mark) error {
		if saves++; saves == 4 {
			return crash
		}
		saved = w
		return nil
	})
	if !errors.Is(err, crash) || !strings.Contains(err.Error(), schema+".users") {
		t.Fatalf("want the crash naming the table, got %v", err)
	}
	if w.Rows != saved.Rows || saved.Done || saved.After == nil || saved.Rows != 300 {
		t.Fatalf("returned %+v, saved %+v", w, saved)
	}
	// The fourth chunk was deleted but its watermark not saved, and the
	// chunks found ahead of it (the window) may have been deleted too:
	// resuming walks their ranges again and finds nothing there, so those
	// rows (whole chunks of 100) go uncounted.
	w, err = p.Table(ctx, tb, saved, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lost := total - w.Rows; !w.Done || lost < 100 || lost > 100*windowPerSession*defaultInFlight || lost%100 != 0 {
		t.Fatalf("resumed: %+v; %d rows uncounted, want 1 to %d chunks of 100", w, lost, windowPerSession*defaultInFlight)
	}
	if n, _ := p.Count(ctx, tb); n != 0 {
		t.Fatalf("%d rows left to prune", n)
	}
	for _, id := range ids(t, db, schema, "users") {
		if id%97 != 0 && id%300 >= 150 {
			t.Fatalf("row %d not owned but kept", id)
		}
	}
	// A done watermark does nothing.
	if w2, err := p.Table(ctx, tb, w, func(watermark.Mark) error { t.Fatal("save called"); return nil }); err != nil || w2.Rows != w.Rows {
		t.Fatalf("done: %+v %v", w2, err)
	}
}

func TestFenceTriggerIsBypassed(t *testing.T) {
	db, schema := newSchema(t, usersDDL, usersRows,
		"CREATE TRIGGER users_fence BEFORE DELETE ON users FOR EACH ROW "+
			"BEGIN IF COALESCE(@shardctl_bypass_fence, 0) <> 1 THEN "+
			"SIGNAL SQLSTATE 'HY000' SET MESSAGE_TEXT = 'moved', MYSQL_ERRNO = 1290; END IF; END",
	)
	ctx := context.Background()
	// Another session is rejected: the fence works.
	if _, err := db.ExecContext(ctx, "DELETE FROM "+dbutil.Table(schema, "users")+" WHERE id = 1"); dbutil.ErrNumber(err) != 1290 {
		t.Fatalf("fence did not reject a plain delete: %v", err)
	}
	tb := table(t, db, schema, "users")
	p := &Pruner{DB: db, Schema: schema, ChunkRows: 500}
	w, err := p.Table(ctx, tb, watermark.Mark{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Rows != 3000 || len(ids(t, db, schema, "users")) != 0 {
		t.Fatalf("bypass: %+v", w)
	}
	// The bypass stayed on the pruner's own session: the pool's sessions are still fenced.
	run(t, db, "INSERT INTO "+dbutil.Table(schema, "users")+" VALUES (1, 1, 'v')")
	for range 10 {
		if _, err := db.ExecContext(ctx, "DELETE FROM "+dbutil.Table(schema, "users")+" WHERE id = 1"); dbutil.ErrNumber(err) != 1290 {
			t.Fatalf("the bypass leaked into the pool: %v", err)
		}
	}
}

func TestEmptyFilterDeletesEverything(t *testing.T) {
	db, schema := newSchema(t,
		"CREATE TABLE k (u BIGINT UNSIGNED NOT NULL, bin VARBINARY(4) NOT NULL, v INT, PRIMARY KEY (u, bin))",
		"INSERT INTO k SELECT 18446744073709551615 - seq DIV 4, UNHEX(HEX(seq % 4)), seq FROM seq_0_to_999",
		"INSERT INTO k VALUES (0, '', 1), (0, 0x00, 2), (9007199254740993, 0xff, 3)",
	)
	ctx := context.Background()
	tb := table(t, db, schema, "k")
	p := &Pruner{DB: db, Schema: schema, ChunkRows: 7}
	if n, err := p.Count(ctx, tb); err != nil || n != 1003 {
		t.Fatalf("Count = %d, %v", n, err)
	}
	w, err := p.Table(ctx, tb, watermark.Mark{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(schema, "k")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if !w.Done || w.Rows != 1003 || n != 0 {
		t.Fatalf("watermark %+v, %d rows left", w, n)
	}
}

func TestThrottleAndCancel(t *testing.T) {
	db, schema := newSchema(t, usersDDL, usersRows)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb := table(t, db, schema, "users")
	calls := 0
	p := &Pruner{DB: db, Schema: schema, ChunkRows: 100, Throttle: func(ctx context.Context) error {
		if calls++; calls == 5 {
			cancel()
		}
		return ctx.Err()
	}}
	w, err := p.Table(ctx, tb, watermark.Mark{}, nil)
	if !errors.Is(err, context.Canceled) || w.Rows != 400 || w.Done {
		t.Fatalf("cancelled run: %+v %v", w, err)
	}
}

// rowLockWaits is the server's Innodb_row_lock_waits.
func rowLockWaits(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A delete of (lo, hi] also locks the row after hi: the sessions must never
// delete two chunks with no rows left between them at once, or one waits
// for the other. Nothing else writes to the table, so no delete ever waits
// for a lock.
func TestChunksInFlightNeverWaitForEachOther(t *testing.T) {
	db, schema := newSchema(t,
		"CREATE TABLE w (id INT PRIMARY KEY, k INT NOT NULL, KEY (k))",
		"INSERT INTO w SELECT seq, seq * 7919 % 10007 FROM seq_1_to_20000",
	)
	ctx := context.Background()
	tb := table(t, db, schema, "w")
	tb.Filter = notOwned("id", 5000, 6000)
	before := rowLockWaits(t, db)
	p := &Pruner{DB: db, Schema: schema, ChunkRows: 50, InFlight: 3}
	w, err := p.Table(ctx, tb, watermark.Mark{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Done || w.Rows != 19000 {
		t.Fatalf("watermark %+v, want 19000 deleted", w)
	}
	if waits := rowLockWaits(t, db) - before; waits != 0 {
		t.Fatalf("%d row lock waits while pruning: chunks deleted at once were neighbours", waits)
	}
	if got := ids(t, db, schema, "w"); len(got) != 1000 || got[0] != 5000 || got[999] != 5999 {
		t.Fatalf("left %d rows", len(got))
	}
}

// A run cancelled with chunks in flight and out of order, on a composite
// key, then resumed from its last saved watermark, deletes exactly the rows
// not owned, whatever the cancel caught.
func TestCancelWithChunksInFlightThenResume(t *testing.T) {
	db, schema := newSchema(t,
		"CREATE TABLE c (a INT NOT NULL, b VARCHAR(8) NOT NULL, id INT NOT NULL, owner INT NULL, PRIMARY KEY (a, b), UNIQUE KEY (id))",
		"INSERT INTO c SELECT seq DIV 4, CONCAT('k', seq % 4), seq, IF(seq % 89 = 0, NULL, seq % 500) FROM seq_1_to_12000",
	)
	tb := table(t, db, schema, "c")
	tb.Filter = notOwned("owner", 100, 250)
	owned := func(id int64) bool { return id%89 == 0 || (id%500 >= 100 && id%500 < 250) }
	for _, stopAt := range []int{1, 7, 23} {
		t.Run(fmt.Sprint("cancel after save ", stopAt), func(t *testing.T) {
			run(t, db, "DELETE FROM "+dbutil.Table(schema, "c"))
			run(t, db, "INSERT INTO "+dbutil.Table(schema, "c")+" SELECT seq DIV 4, CONCAT('k', seq % 4), seq, IF(seq % 89 = 0, NULL, seq % 500) FROM "+dbutil.Table(schema, "seq_1_to_12000"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := &Pruner{DB: db, Schema: schema, ChunkRows: 40, InFlight: 3}
			var saved watermark.Mark
			saves := 0
			_, err := p.Table(ctx, tb, watermark.Mark{}, func(w watermark.Mark) error {
				saved = w
				if saves++; saves == stopAt {
					cancel()
				}
				return nil
			})
			if !errors.Is(err, context.Canceled) || saved.Done {
				t.Fatalf("cancelled run: %v, saved %+v", err, saved)
			}
			w, err := p.Table(context.Background(), tb, saved, nil)
			if err != nil || !w.Done {
				t.Fatalf("resume: %+v %v", w, err)
			}
			var left []int64
			var id int64
			if err := dbutil.ScanEach(context.Background(), db, "SELECT id FROM "+dbutil.Table(schema, "c")+" ORDER BY id", nil,
				[]any{&id}, func() error { left = append(left, id); return nil }); err != nil {
				t.Fatal(err)
			}
			var want []int64
			for id := int64(1); id <= 12000; id++ {
				if owned(id) {
					want = append(want, id)
				}
			}
			if fmt.Sprint(left) != fmt.Sprint(want) {
				t.Fatalf("left %d rows, want the %d owned", len(left), len(want))
			}
		})
	}
}

// A chunk whose delete meets another transaction's lock past the lock wait
// timeout (or a deadlock: the same rollback of the whole statement) runs
// again, so a cleanup beside the application's writes does not stop (CI:
// a split's cleanup stopped with exit 3 on a deadlock with the workload).
func TestChunkRetriedAfterALockError(t *testing.T) {
	db, schema := newSchema(t,
		"CREATE TABLE w (id INT PRIMARY KEY, v INT NOT NULL)",
		"INSERT INTO w SELECT seq, seq FROM seq_1_to_2000",
	)
	ctx := context.Background()
	tb := table(t, db, schema, "w")
	tb.Filter = notOwned("id", 1, 1001)
	// The prune's sessions give up a lock wait after a second.
	var old int
	if err := db.QueryRow("SELECT @@GLOBAL.innodb_lock_wait_timeout").Scan(&old); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, db, "SET GLOBAL innodb_lock_wait_timeout = 1")
	t.Cleanup(func() { _, _ = db.Exec("SET GLOBAL innodb_lock_wait_timeout = ?", old) })
	// Another transaction holds a row of the first chunk for 1.5 s.
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "UPDATE "+dbutil.Table(schema, "w")+" SET v = v + 1 WHERE id = 1500"); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		_, _ = holder.ExecContext(ctx, "COMMIT")
	}()
	// A pool opened after the setting, so its sessions have it.
	p := &Pruner{DB: testenv.Get(t).DB(t, 1, ""), Schema: schema, ChunkRows: 1000, InFlight: 1}
	w, err := p.Table(ctx, tb, watermark.Mark{}, nil)
	if err != nil {
		t.Fatalf("a chunk behind a held lock: %v", err)
	}
	if !w.Done || w.Rows != 1000 {
		t.Fatalf("watermark %+v, want 1000 deleted", w)
	}
}
