package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/tables"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var serverIDs atomic.Uint32

func init() { serverIDs.Store(1000) }

// pair is a source schema on server 1 and its empty twin on server 2.
type pair struct {
	env      *testenv.Env
	src, dst *sql.DB // pools without a default schema
	schema   string  // source schema; the target is schema+"_dst"
}

func (p pair) target() string { return p.schema + "_dst" }

func newPair(t *testing.T, schema string, ddl ...string) pair {
	t.Helper()
	env := testenv.Get(t)
	p := pair{env: env, src: env.DB(t, 1, ""), dst: env.DB(t, 2, ""), schema: schema}
	testenv.Schema(t, p.src, p.schema, ddl...)
	testenv.Schema(t, p.dst, p.target(), ddl...)
	return p
}

// exec runs a statement; "USE x; stmt" runs stmt with x as the default
// schema on one connection (testenv.InSchema).
func exec(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	if rest, ok := strings.CutPrefix(q, "USE "); ok {
		schema, stmt, _ := strings.Cut(rest, "; ")
		testenv.InSchema(t, db, schema, stmt)
		return
	}
	testenv.Exec(t, db, q, args...)
}

// tx runs statements in one source transaction.
func tx(t testing.TB, db *sql.DB, stmts ...string) {
	t.Helper()
	if err := txErr(db, stmts...); err != nil {
		t.Fatal(err)
	}
}

func txErr(db *sql.DB, stmts ...string) error {
	return dbutil.InTx(context.Background(), db, func(tx *sql.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(testenv.SQL(s)); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
}

func masterStatus(t testing.TB, db *sql.DB) Position {
	t.Helper()
	p, err := MasterStatus(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (p pair) tables(t testing.TB, names ...string) []tables.Table {
	t.Helper()
	all, err := tables.Inspect(context.Background(), p.src, p.schema)
	if err != nil {
		t.Fatal(err)
	}
	var out []tables.Table
	for _, n := range names {
		tb, ok := tables.Find(all, n)
		if !ok {
			t.Fatalf("table %s.%s not found", p.schema, n)
		}
		out = append(out, tb)
	}
	return out
}

func (p pair) config(t testing.TB, start Position, tbs []tables.Table) Config {
	return Config{
		Source:       p.env.Addr(1),
		Creds:        sandbox.Creds(),
		Schema:       p.schema,
		Target:       p.dst,
		TargetSchema: p.target(),
		Tables:       tbs,
		ServerID:     serverIDs.Add(1),
		Start:        start,
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func start(t testing.TB, cfg Config) *Tailer {
	t.Helper()
	tl, err := Start(context.Background(), cfg) // the context bounds the tail's life, not just its start
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tl.Stop() })
	return tl
}

func waitFor(t testing.TB, tl *Tailer, p Position) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tl.WaitFor(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// stopped waits for the tail to stop by itself (what: at which event) and
// returns its error.
func stopped(t testing.TB, tl *Tailer, what string) error {
	t.Helper()
	select {
	case <-tl.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the tail did not stop %s", what)
	}
	return tl.Err()
}

// dump returns a table's rows in primary key order, NULL marked.
func dump(t testing.TB, db *sql.DB, schema, table, orderBy string) []string {
	t.Helper()
	return testenv.Dump(t, db, "SELECT * FROM "+dbutil.Table(schema, table)+" ORDER BY "+orderBy)
}

func (p pair) same(t testing.TB, table, orderBy string) int {
	t.Helper()
	want := dump(t, p.src, p.schema, table, orderBy)
	got := dump(t, p.dst, p.target(), table, orderBy)
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Fatalf("table %s differs\nsource:\n%s\ntarget:\n%s", table, strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	return len(want)
}

const typesTable = `CREATE TABLE t_types (
	id INT NOT NULL PRIMARY KEY,
	u BIGINT UNSIGNED NULL,
	s VARCHAR(50) CHARACTER SET utf8mb4 NULL,
	l VARCHAR(20) CHARACTER SET latin1 NULL,
	d DATE NULL,
	dt DATETIME(6) NULL,
	ts TIMESTAMP(3) NULL DEFAULT NULL,
	tm TIME(2) NULL,
	dc DECIMAL(20,6) NULL,
	f FLOAT NULL,
	db DOUBLE NULL,
	b BLOB NULL,
	vb VARBINARY(16) NULL,
	j JSON NULL,
	e ENUM('a','b','c') NULL,
	st SET('x','y','z') NULL,
	bt BIT(64) NULL,
	y YEAR NULL,
	ti TINYINT UNSIGNED NULL,
	mi MEDIUMINT UNSIGNED NULL,
	si SMALLINT NULL,
	g BIGINT AS (id * 2) VIRTUAL
) ENGINE=InnoDB`

const compTable = `CREATE TABLE t_comp (
	tenant INT NOT NULL,
	k VARCHAR(32) NOT NULL,
	v INT NULL,
	note TEXT NULL,
	PRIMARY KEY (tenant, k),
	UNIQUE KEY uv (v)
) ENGINE=InnoDB`

// workload writes inserts, updates (some moving the key), deletes and
// multi-statement transactions to the tables of typesTable and compTable.
func workload(t testing.TB, db *sql.DB, schema string) {
	q := func(s string) string { return strings.ReplaceAll(s, "S.", dbutil.QuoteIdent(schema)+".") }
	tx(t, db, q(`INSERT INTO S.t_types (id,u,s,l,d,dt,ts,tm,dc,f,db,b,vb,j,e,st,bt,y,ti,mi,si) VALUES
		(1, 18446744073709551615, 'emoji 😀 ünïcödé', 'café', '2024-02-29', '2024-02-29 23:59:59.123456', '2024-03-10 02:30:00.125', '-838:59:59.00',
		 '-12345678901234.123456', 3.14159, 1.7976931348623157e308, X'00FF0D0A5C27225A', X'DEADBEEF00', '{"a": [1, 2, {"b": null}], "c": "é"}',
		 'b', 'x,z', b'1111111111111111111111111111111111111111111111111111111111111111', 2155, 255, 16777215, -32768)`),
		q(`INSERT INTO S.t_types (id) VALUES (2)`),
		q(`INSERT INTO S.t_types (id, s, l, b, vb, dc, d, dt, tm) VALUES (3, '', '', '', '', '0.000001', '1000-01-01', '1000-01-01 00:00:00', '00:00:00')`),
	)
	tx(t, db, q(`INSERT INTO S.t_comp VALUES (1,'a',10,'one'), (1,'b',20,NULL), (2,'a',30,'x'), (2,'Äb',40,'umlaut')`))
	tx(t, db, q(`UPDATE S.t_types SET s = 'changed', u = 0, f = -0.5, bt = b'0', y = 1901 WHERE id = 1`))
	tx(t, db, q(`UPDATE S.t_types SET id = 20, s = 'moved key' WHERE id = 2`))  // key change
	tx(t, db, q(`UPDATE S.t_comp SET tenant = 3 WHERE tenant = 1 AND k = 'a'`), // composite key change
		q(`UPDATE S.t_comp SET note = CONCAT(COALESCE(note, ''), '+') WHERE tenant = 2`),
		q(`DELETE FROM S.t_comp WHERE tenant = 1 AND k = 'b'`))
	// A unique value moves between rows: replaying this over later states needs REPLACE.
	tx(t, db, q(`UPDATE S.t_comp SET v = 99 WHERE tenant = 3 AND k = 'a'`),
		q(`INSERT INTO S.t_comp VALUES (4, 'new', 10, 'took v=10')`))
	tx(t, db, q(`DELETE FROM S.t_types WHERE id = 3`))
	tx(t, db, q(`INSERT INTO S.t_types (id, s) VALUES (3, 'back again')`))
	for i := 100; i < 130; i++ {
		tx(t, db, q(fmt.Sprintf(`INSERT INTO S.t_types (id, s, dc) VALUES (%d, 'row %d', %d.5)`, i, i, i)))
	}
	tx(t, db, q(`UPDATE S.t_types SET dc = dc * 2 WHERE id BETWEEN 100 AND 129`))
	tx(t, db, q(`DELETE FROM S.t_types WHERE id BETWEEN 120 AND 124`))
	tx(t, db, q(`INSERT INTO S.t_other VALUES (1, 1)`), q(`INSERT INTO S.t_types (id, s) VALUES (200, 'same txn as an unlisted table')`))
}

func TestTailAppliesChanges(t *testing.T) {
	p := newPair(t, "bl_apply", typesTable, compTable, "CREATE TABLE t_other (id INT PRIMARY KEY, v INT)")
	begin := masterStatus(t, p.src)
	workload(t, p.src, p.schema)
	end := masterStatus(t, p.src)

	var cps []Position
	var mu sync.Mutex
	cfg := p.config(t, begin, p.tables(t, "t_comp", "t_types"))
	cfg.Checkpoint = func(_ context.Context, pos Position) error {
		mu.Lock()
		cps = append(cps, pos)
		mu.Unlock()
		return nil
	}
	tl := start(t, cfg)
	waitFor(t, tl, end)
	if n := p.same(t, "t_types", "id"); n != 29 {
		t.Errorf("t_types has %d rows, want 29", n)
	}
	p.same(t, "t_comp", "tenant, k")
	if got := dump(t, p.dst, p.target(), "t_other", "id"); len(got) != 0 {
		t.Errorf("an unlisted table was applied: %v", got)
	}

	// The tail keeps following new writes.
	tx(t, p.src, "UPDATE "+dbutil.Table(p.schema, "t_types")+" SET s = 'live' WHERE id = 1")
	waitFor(t, tl, masterStatus(t, p.src))
	p.same(t, "t_types", "id")

	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	st := tl.Stats()
	if st.Applied != tl.Applied() || st.RowsApplied == 0 || st.Batches == 0 || st.Transactions == 0 || st.LastEventTime.IsZero() {
		t.Errorf("stats: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(cps) == 0 || cps[len(cps)-1] != tl.Applied() {
		t.Errorf("last checkpoint %v, applied %s", cps, tl.Applied())
	}
	t.Logf("stats: %+v", st)
}

func TestTailRangeFilter(t *testing.T) {
	p := newPair(t, "bl_range",
		"CREATE TABLE t_id (id INT PRIMARY KEY, v VARCHAR(10))",
		"CREATE TABLE t_k (id INT PRIMARY KEY, k INT NOT NULL, v VARCHAR(10))")
	begin := masterStatus(t, p.src)
	id, k := dbutil.Table(p.schema, "t_id"), dbutil.Table(p.schema, "t_k")
	tx(t, p.src, "INSERT INTO "+id+" VALUES (50,'a'),(100,'b'),(150,'c'),(199,'d'),(200,'e'),(250,'f'),(120,'g')")
	tx(t, p.src, "UPDATE "+id+" SET id = 260 WHERE id = 150") // in -> out
	tx(t, p.src, "UPDATE "+id+" SET id = 130 WHERE id = 50")  // out -> in
	tx(t, p.src, "UPDATE "+id+" SET id = 300 WHERE id = 250") // out -> out
	tx(t, p.src, "UPDATE "+id+" SET id = 110 WHERE id = 100") // in -> in, new key
	tx(t, p.src, "UPDATE "+id+" SET v = 'dd' WHERE id = 199")
	tx(t, p.src, "DELETE FROM "+id+" WHERE id IN (200, 120)")
	tx(t, p.src, "INSERT INTO "+k+" VALUES (1, 50, 'a'), (2, 150, 'b'), (3, 250, 'c'), (4, 199, 'd')")
	tx(t, p.src, "UPDATE "+k+" SET k = 300 WHERE id = 2") // out of range
	tx(t, p.src, "UPDATE "+k+" SET k = 100 WHERE id = 1") // into range
	tx(t, p.src, "UPDATE "+k+" SET k = 260, v = 'x' WHERE id = 3")
	tx(t, p.src, "UPDATE "+k+" SET id = 40 WHERE id = 4") // key change inside the range
	tx(t, p.src, "UPDATE "+k+" SET k = 120 WHERE id = 2") // back in
	end := masterStatus(t, p.src)

	lo, hi := keyspace.IntK(100), keyspace.IntK(200)
	tbs := p.tables(t, "t_id", "t_k")
	tbs[0].Filter = keyspace.Filter{Column: "id", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}
	tbs[1].Filter = keyspace.Filter{Column: "k", Ranges: []keyspace.Range{{Lo: &lo, Hi: &hi}}}
	tl := start(t, p.config(t, begin, tbs))
	waitFor(t, tl, end)

	check := func(table, where string) {
		t.Helper()
		want := dump(t, p.src, p.schema, table, "id")
		var in []string
		var x int
		err := dbutil.ScanEach(context.Background(), p.src, "SELECT id FROM "+dbutil.Table(p.schema, table)+" WHERE "+where+" ORDER BY id", nil,
			[]any{&x}, func() error { in = append(in, fmt.Sprint(x)); return nil })
		if err != nil {
			t.Fatal(err)
		}
		got := dump(t, p.dst, p.target(), table, "id")
		var gotIDs []string
		for _, g := range got {
			gotIDs = append(gotIDs, strings.Trim(strings.SplitN(g, " | ", 2)[0], `"`))
		}
		if strings.Join(gotIDs, ",") != strings.Join(in, ",") {
			t.Fatalf("%s: target ids %v, want %v (source %v)", table, gotIDs, in, want)
		}
	}
	check("t_id", "id >= 100 AND id < 200")
	check("t_k", "k >= 100 AND k < 200")
	if got := strings.Join(dump(t, p.dst, p.target(), "t_k", "id"), "\n"); got != `"1" | "100" | "a"`+"\n"+`"2" | "120" | "b"`+"\n"+`"40" | "199" | "d"` {
		t.Fatalf("t_k on target:\n%s", got)
	}
	if st := tl.Stats(); st.RowsSkipped == 0 {
		t.Errorf("no rows skipped: %+v", st)
	}
}

func TestTailReplayIsIdempotent(t *testing.T) {
	p := newPair(t, "bl_replay", typesTable, compTable, "CREATE TABLE t_other (id INT PRIMARY KEY, v INT)")
	begin := masterStatus(t, p.src)
	workload(t, p.src, p.schema)
	end := masterStatus(t, p.src)
	tbs := p.tables(t, "t_types", "t_comp")

	tl := start(t, p.config(t, begin, tbs))
	waitFor(t, tl, end)
	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	// Again from the original start, over a target that holds the final state.
	cfg := p.config(t, begin, tbs)
	cfg.BatchRows = 3
	tl = start(t, cfg)
	waitFor(t, tl, end)
	if err := tl.Stop(); err != nil {
		t.Fatalf("replay: %v", err)
	}
	p.same(t, "t_types", "id")
	p.same(t, "t_comp", "tenant, k")
}

// boundaries lists the positions after every event group end (XID, COMMIT or
// DDL query, rotation) from p on, as SHOW BINLOG EVENTS shows them.
func boundaries(t testing.TB, db *sql.DB, p Position) map[Position]bool {
	t.Helper()
	files, err := BinaryLogs(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	out := map[Position]bool{p: true}
	for _, f := range files {
		if (Position{File: f, Pos: 1 << 31}).Compare(p) < 0 {
			continue
		}
		var logName, typ, info string
		var pos, serverID, end uint32
		err := dbutil.ScanEach(context.Background(), db, "SHOW BINLOG EVENTS IN '"+f+"'", nil,
			[]any{&logName, &pos, &typ, &serverID, &end, &info}, func() error {
				switch {
				case typ == "Xid", typ == "Query" && info != "BEGIN":
					out[Position{File: f, Pos: end}] = true
				case typ == "Rotate":
					out[Position{File: strings.SplitN(info, ";", 2)[0], Pos: 4}] = true
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestTailCheckpoints(t *testing.T) {
	p := newPair(t, "bl_ckpt",
		"CREATE TABLE ev (id INT PRIMARY KEY, pad VARCHAR(20))",
		"CREATE TABLE cnt (id INT PRIMARY KEY, n INT NOT NULL)")
	exec(t, p.src, "INSERT INTO "+dbutil.Table(p.schema, "cnt")+" VALUES (1, 0)")
	exec(t, p.dst, "INSERT INTO "+dbutil.Table(p.target(), "cnt")+" VALUES (1, 0)") // as a copy would have it
	begin := masterStatus(t, p.src)
	ev, cnt := dbutil.Table(p.schema, "ev"), dbutil.Table(p.schema, "cnt")

	// Each transaction adds 1 or 3 rows and counts them: on the target,
	// COUNT(ev) = cnt.n holds exactly at transaction boundaries.
	const txns = 600
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		id := 0
		for i := 0; i < txns; i++ {
			n := 1 + 2*(i%2)
			stmts := []string{}
			for j := 0; j < n; j++ {
				id++
				stmts = append(stmts, fmt.Sprintf("INSERT INTO %s VALUES (%d, 'x')", ev, id))
			}
			stmts = append(stmts, fmt.Sprintf("UPDATE %s SET n = n + %d WHERE id = 1", cnt, n))
			if err := txErr(p.src, stmts...); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	var mu sync.Mutex
	var cps []Position
	cfg := p.config(t, begin, p.tables(t, "ev", "cnt"))
	cfg.BatchRows = 5 // many commits, most cut at a boundary inside a batch
	cfg.Checkpoint = func(_ context.Context, pos Position) error {
		mu.Lock()
		cps = append(cps, pos)
		mu.Unlock()
		return nil
	}
	tl := start(t, cfg)
	deadline := time.Now().Add(20 * time.Second)
	for tl.Stats().Transactions < txns/3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	<-writerDone

	mu.Lock()
	got := append([]Position(nil), cps...)
	mu.Unlock()
	if len(got) < 2 {
		t.Fatalf("only %d checkpoints", len(got))
	}
	bounds := boundaries(t, p.src, begin)
	for i, c := range got {
		if i > 0 && c.Compare(got[i-1]) <= 0 {
			t.Fatalf("checkpoint %d (%s) does not move past %s", i, c, got[i-1])
		}
		if !bounds[Position{File: c.File, Pos: c.Pos}] {
			t.Fatalf("checkpoint %s is not at a transaction boundary", c)
		}
	}
	if last := got[len(got)-1]; last != tl.Applied() {
		t.Fatalf("last checkpoint %s, applied %s", last, tl.Applied())
	}
	var rowsN, n int
	if err := p.dst.QueryRow("SELECT (SELECT COUNT(*) FROM "+dbutil.Table(p.target(), "ev")+"), n FROM "+dbutil.Table(p.target(), "cnt")).Scan(&rowsN, &n); err != nil {
		t.Fatal(err)
	}
	if rowsN != n {
		t.Fatalf("target stopped mid-transaction: %d rows, counter %d", rowsN, n)
	}
	t.Logf("stopped at %s after %d checkpoints with %d rows", tl.Applied(), len(got), rowsN)

	// Resume from the last checkpoint: the rest arrives, nothing twice.
	tl2 := start(t, p.config(t, tl.Applied(), p.tables(t, "ev", "cnt")))
	waitFor(t, tl2, masterStatus(t, p.src))
	p.same(t, "ev", "id")
	p.same(t, "cnt", "id")
}

// TestTailStopsAtDDL runs a tail over rows, a schema statement, then more
// rows, and expects a stop with ErrDDL before the statement.
func TestTailStopsAtDDL(t *testing.T) {
	cases := []struct {
		name, stmt, table string
		carriable         bool // --on-ddl apply would have carried it (ErrDDLCarriable)
	}{
		{"alter listed", "ALTER TABLE {S}.t ADD COLUMN extra INT", "t", true},
		{"truncate", "TRUNCATE TABLE {S}.t", "t", false},
		{"create unlisted", "CREATE TABLE {S}.newt (id INT PRIMARY KEY)", "newt", false},
		{"alter unlisted with default schema", "USE {S}; ALTER TABLE side ADD COLUMN extra INT", "side", false},
		{"rename into", "RENAME TABLE {S}_other.x TO {S}.x", "", false},
		{"unparsed naming the schema", "ALTER ONLINE TABLE {S}.t ADD COLUMN extra INT", "", false},
		{"unparsed unqualified", "USE {S}; ALTER TABLE t ADD COLUMN extra INT INVISIBLE", "", false},
		{"drop database", "DROP DATABASE {S}", "", false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if testenv.MySQL() && strings.Contains(c.stmt, "ONLINE") {
				t.Skip("ALTER ONLINE is MariaDB syntax")
			}
			p := newPair(t, fmt.Sprintf("bl_ddl%d", i),
				"CREATE TABLE t (id INT PRIMARY KEY, v INT)", "CREATE TABLE side (id INT PRIMARY KEY)")
			other := p.schema + "_other"
			exec(t, p.src, "DROP DATABASE IF EXISTS "+other)
			exec(t, p.src, "CREATE DATABASE "+other)
			exec(t, p.src, "CREATE TABLE "+other+".x (id INT PRIMARY KEY)")
			defer exec(t, p.src, "DROP DATABASE IF EXISTS "+other)
			tb := dbutil.Table(p.schema, "t")
			begin := masterStatus(t, p.src)
			tl := start(t, p.config(t, begin, p.tables(t, "t")))
			tx(t, p.src, "INSERT INTO "+tb+" VALUES (1, 1), (2, 2)")
			beforeDDL := masterStatus(t, p.src)
			exec(t, p.src, strings.ReplaceAll(c.stmt, "{S}", p.schema))
			if c.name != "drop database" {
				tx(t, p.src, "INSERT INTO "+dbutil.Table(p.schema, "side")+" (id) VALUES (3)")
				tx(t, p.src, "INSERT INTO "+tb+" (id, v) VALUES (3, 3)")
			}
			err := stopped(t, tl, "at the DDL")
			if !errors.Is(err, ErrDDL) {
				t.Fatalf("stopped with %v, want ErrDDL", err)
			}
			if errors.Is(err, ErrDDLCarriable) != c.carriable {
				t.Errorf("ErrDDLCarriable %v, want %v: %v", !c.carriable, c.carriable, err)
			}
			msg := err.Error()
			for _, want := range []string{p.schema, "stopped safely", "restart", c.table} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
			if tl.Applied().Compare(beforeDDL) > 0 {
				t.Errorf("applied %s is past the DDL at %s", tl.Applied(), beforeDDL)
			}
			got := dump(t, p.dst, p.target(), "t", "id")
			if strings.Join(got, ";") != `"1" | "1";"2" | "2"` {
				t.Errorf("target rows %v, want only the rows before the DDL", got)
			}
			t.Logf("%v", err)
		})
	}
}

// TestStartRefusesChangedTable: a listed table whose columns differ from the
// plan is refused at start, before any row is decoded with the wrong layout.
func TestStartRefusesChangedTable(t *testing.T) {
	p := newPair(t, "bl_changed", "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	tbs := p.tables(t, "t")
	begin := masterStatus(t, p.src)
	exec(t, p.src, "ALTER TABLE "+dbutil.Table(p.schema, "t")+" ADD COLUMN w INT")
	_, err := Start(context.Background(), p.config(t, begin, tbs))
	if !errors.Is(err, ErrDDL) {
		t.Fatalf("Start over a changed table: %v", err)
	}
}

func TestTailIgnoresOtherSchemasAndTriggers(t *testing.T) {
	p := newPair(t, "bl_calm", "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	other := "bl_calm_neighbour"
	exec(t, p.src, "DROP DATABASE IF EXISTS "+other)
	exec(t, p.src, "CREATE DATABASE "+other)
	tb := dbutil.Table(p.schema, "t")
	begin := masterStatus(t, p.src)
	tl := start(t, p.config(t, begin, p.tables(t, "t")))
	tx(t, p.src, "INSERT INTO "+tb+" VALUES (1, 1)")
	exec(t, p.src, "CREATE TABLE "+other+".x (id INT PRIMARY KEY)")
	exec(t, p.src, "ALTER TABLE "+other+".x ADD COLUMN v INT")
	if testenv.MySQL() {
		exec(t, p.src, "ALTER TABLE "+other+".x ADD COLUMN w INT")
	} else {
		exec(t, p.src, "ALTER ONLINE TABLE "+other+".x ADD COLUMN w INT") // canal cannot parse it
	}
	tx(t, p.src, "INSERT INTO "+other+".x VALUES (1, 1, 1)")
	tx(t, p.src, "INSERT INTO "+tb+" VALUES (2, 2)")
	exec(t, p.src, "DROP TABLE "+other+".x")
	waitFor(t, tl, masterStatus(t, p.src))
	// A fence trigger on the shard is not a schema change; the binlog then
	// ends in a statement canal reports no position for, which WaitFor gets past.
	exec(t, p.src, "CREATE TRIGGER "+dbutil.Table(p.schema, "fence_t")+" BEFORE UPDATE ON "+tb+" FOR EACH ROW SET NEW.v = NEW.v")
	waitFor(t, tl, masterStatus(t, p.src))
	select {
	case <-tl.Done():
		t.Fatalf("tail stopped: %v", tl.Err())
	default:
	}
	p.same(t, "t", "id")
	exec(t, p.src, "DROP DATABASE "+other)
}

func TestTailStopsAtMissingTable(t *testing.T) {
	p := newPair(t, "bl_gone", "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	tbs := p.tables(t, "t")
	begin := masterStatus(t, p.src)
	tl := start(t, p.config(t, begin, tbs))
	// The row event may reach the tail after the table is gone (the reader
	// finds no definition) or before (the DROP stops it): both stop it.
	tx(t, p.src, "INSERT INTO "+dbutil.Table(p.schema, "t")+" VALUES (1, 1)")
	exec(t, p.src, "DROP TABLE "+dbutil.Table(p.schema, "t"))
	if err := stopped(t, tl, "at the DROP TABLE"); !errors.Is(err, ErrDDL) {
		t.Fatalf("stopped with %v", err)
	}
	// Replaying over the vanished table is refused up front.
	_, err := Start(context.Background(), p.config(t, begin, tbs))
	if !errors.Is(err, ErrDDL) || !strings.Contains(err.Error(), "no longer exists") {
		t.Fatalf("Start: %v", err)
	}
}

func TestMasterStatusAndPurged(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	ctx := context.Background()
	old := masterStatus(t, db)
	if old.File == "" || old.Pos < 4 {
		t.Fatalf("master status %s", old)
	}
	if purged, err := Purged(ctx, db, old); err != nil || purged {
		t.Fatalf("Purged(current) = %v, %v", purged, err)
	}
	exec(t, db, "FLUSH BINARY LOGS")
	now := masterStatus(t, db)
	if now.Compare(old) <= 0 {
		t.Fatalf("after FLUSH BINARY LOGS %s is not past %s", now, old)
	}
	// MariaDB keeps a binlog until its binlog checkpoint has moved past it: retry the purge.
	for i := 0; i < 50; i++ {
		exec(t, db, "PURGE BINARY LOGS TO '"+now.File+"'")
		if purged, err := Purged(ctx, db, old); err != nil || purged {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if purged, err := Purged(ctx, db, old); err != nil || !purged {
		w := testenv.Dump(t, db, "SHOW BINARY LOGS")
		t.Fatalf("Purged(old) = %v, %v (old %s now %s logs %v)", purged, err, old, now, w)
	}
	if _, err := Purged(ctx, db, Position{File: "mariadb-bin.999999", Pos: 4}); err == nil {
		t.Fatal("a position beyond the newest file was accepted")
	}
	p := pair{env: env, src: db, dst: env.DB(t, 2, ""), schema: "bl_purged"}
	exec(t, db, "CREATE DATABASE IF NOT EXISTS bl_purged")
	exec(t, db, "CREATE TABLE IF NOT EXISTS bl_purged.t (id INT PRIMARY KEY)")
	exec(t, p.dst, "CREATE DATABASE IF NOT EXISTS bl_purged_dst")
	exec(t, p.dst, "CREATE TABLE IF NOT EXISTS bl_purged_dst.t (id INT PRIMARY KEY)")
	_, err := Start(ctx, p.config(t, old, p.tables(t, "t")))
	if err == nil || !strings.Contains(err.Error(), "purged") {
		t.Fatalf("Start from a purged position: %v", err)
	}
	if strings.Contains(err.Error(), sandbox.ToolPassword) {
		t.Fatal("the password is in an error")
	}
	// A wrong password is reported without the password.
	cfg := p.config(t, now, p.tables(t, "t"))
	cfg.Creds.Password = "not-the-password-123"
	if _, err := Start(ctx, cfg); err == nil || strings.Contains(err.Error(), cfg.Creds.Password) {
		t.Fatalf("Start with a wrong password: %v", err)
	}
}

// TestApplyBacklogRate measures the apply rate over a backlog of
// single-row transactions. SHARDCTL_BENCH=1 runs it with 100k
// transactions (SHARDCTL_BENCH_N overrides); without it, a small backlog
// checks the path.
func TestApplyBacklogRate(t *testing.T) {
	n := 3000
	if os.Getenv("SHARDCTL_BENCH") != "" {
		n = 100000
		if s := os.Getenv("SHARDCTL_BENCH_N"); s != "" {
			fmt.Sscan(s, &n)
		}
	}
	p := newPair(t, "bl_bench", "CREATE TABLE t (id INT PRIMARY KEY, k INT NOT NULL, pad VARCHAR(100) NOT NULL, ts DATETIME(6) NOT NULL)")
	begin := masterStatus(t, p.src)
	tb := dbutil.Table(p.schema, "t")
	const writers = 4
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn, err := p.src.Conn(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			for i := w; i < n; i += writers {
				// autocommit: one row, one transaction
				if _, err := conn.ExecContext(context.Background(), "INSERT INTO "+tb+" VALUES (?, ?, ?, NOW(6))", i, i%1000, "padding padding padding padding padding"); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	writeDur := time.Since(t0)
	end := masterStatus(t, p.src)

	t1 := time.Now()
	cfg := p.config(t, begin, p.tables(t, "t"))
	if s := os.Getenv("SHARDCTL_BENCH_WORKERS"); s != "" {
		fmt.Sscan(s, &cfg.Workers)
	}
	tl := start(t, cfg)
	waitFor(t, tl, end)
	applyDur := time.Since(t1)
	st := tl.Stats()
	if st.RowsApplied != int64(n) {
		t.Fatalf("applied %d rows, want %d", st.RowsApplied, n)
	}
	p.same(t, "t", "id")
	srcRate := float64(n) / writeDur.Seconds()
	applyRate := float64(n) / applyDur.Seconds()
	t.Logf("backlog of %d single-row transactions: source wrote %.0f rows/s (%d writers), tail applied %.0f rows/s (%.2fx) in %d batches (%d parallel, %d lock retries)",
		n, srcRate, writers, applyRate, applyRate/srcRate, st.Batches, st.Parallel, st.LockRetries)
}

func TestTailStopsOnTargetError(t *testing.T) {
	p := newPair(t, "bl_tgterr", "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	exec(t, p.dst, "ALTER TABLE "+dbutil.Table(p.target(), "t")+" DROP COLUMN v") // not the source's definition
	begin := masterStatus(t, p.src)
	tx(t, p.src, "INSERT INTO "+dbutil.Table(p.schema, "t")+" VALUES (1, 1)")
	var cps atomic.Int32
	cfg := p.config(t, begin, p.tables(t, "t"))
	cfg.Checkpoint = func(context.Context, Position) error { cps.Add(1); return nil }
	tl := start(t, cfg)
	err := stopped(t, tl, "at the target's error")
	if err == nil || !strings.Contains(err.Error(), "binlog tail of bl_tgterr") || !strings.Contains(err.Error(), "apply to t") {
		t.Fatalf("stopped with %v", err)
	}
	if tl.Applied() != begin || cps.Load() != 0 {
		t.Fatalf("applied moved to %s (%d checkpoints) although nothing was committed", tl.Applied(), cps.Load())
	}
	if err := tl.WaitFor(context.Background(), masterStatus(t, p.src)); err == nil || err.Error() != tl.Err().Error() {
		t.Fatalf("WaitFor on a failed tail: %v", err)
	}
}

// TestTailLargeTransactions: source transactions larger than a batch and
// rows larger than a statement's share are split, and still land whole.
func TestTailLargeTransactions(t *testing.T) {
	p := newPair(t, "bl_large", "CREATE TABLE t (id INT PRIMARY KEY, v INT, b LONGBLOB)")
	tb := dbutil.Table(p.schema, "t")
	begin := masterStatus(t, p.src)
	tx(t, p.src, "INSERT INTO "+tb+" (id, v) SELECT seq, seq FROM "+dbutil.Table(p.schema, "seq_1_to_5000"),
		"UPDATE "+tb+" SET v = v + 1 WHERE id % 3 = 0",
		"DELETE FROM "+tb+" WHERE id % 7 = 0")
	tx(t, p.src, "UPDATE "+tb+" SET b = REPEAT(CHAR(id % 256), 1000000) WHERE id <= 24")
	end := masterStatus(t, p.src)
	cfg := p.config(t, begin, p.tables(t, "t"))
	cfg.BatchRows = 700
	tl := start(t, cfg)
	waitFor(t, tl, end)
	var n, sum int64
	var blobs string
	q := "SELECT COUNT(*), SUM(v), SHA2(GROUP_CONCAT(SHA2(b, 256) ORDER BY id), 256) FROM "
	if err := p.src.QueryRow(q+tb).Scan(&n, &sum, &blobs); err != nil {
		t.Fatal(err)
	}
	var n2, sum2 int64
	var blobs2 string
	if err := p.dst.QueryRow(q+dbutil.Table(p.target(), "t")).Scan(&n2, &sum2, &blobs2); err != nil {
		t.Fatal(err)
	}
	if n != n2 || sum != sum2 || blobs != blobs2 {
		t.Fatalf("source %d rows sum %d blobs %s, target %d rows sum %d blobs %s", n, sum, blobs, n2, sum2, blobs2)
	}
	if st := tl.Stats(); st.Batches < 10 {
		t.Errorf("only %d target transactions for %d row changes in batches of 700", st.Batches, st.RowsApplied)
	}
}

// TestTailParallelApply: large batches are spread over several target
// sessions, and every row still ends in its last state: each row is
// changed in many source transactions (its counter counts them, so an
// older change applied last would show), unique values move between rows,
// keys move, rows are deleted and come back, and a transaction larger
// than a batch is cut into parallel heads.
func TestTailParallelApply(t *testing.T) {
	p := newPair(t, "bl_parallel", "CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL, u INT NOT NULL, pad VARCHAR(40), UNIQUE KEY uu (u))")
	tb := dbutil.Table(p.schema, "t")
	begin := masterStatus(t, p.src)
	// 400 hot rows: a batch (cut by size or by time, see apply) holds
	// several changes of most of them.
	var changes int64 // rows the workload changed: each is one row change applied
	tx := func(t *testing.T, db *sql.DB, stmts ...string) { changes += txChanges(t, db, stmts...) }
	tx(t, p.src, "INSERT INTO "+tb+" SELECT seq, 0, seq, 'seed' FROM "+dbutil.Table(p.schema, "seq_1_to_400"))
	for r := 1; r <= 24; r++ {
		// Every row once more, in transactions of 50 rows, in descending
		// key order every other round: a row's later change sits at the
		// other end of the batch from its earlier one.
		for i := 0; i < 8; i++ {
			lo, order := 1+50*i, "ASC"
			if r%2 == 1 {
				lo, order = 351-50*i, "DESC"
			}
			tx(t, p.src, fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id BETWEEN %d AND %d ORDER BY id %s", tb, lo, lo+49, order))
		}
		// Unique values shift by one row: each value moves to another row.
		tx(t, p.src, fmt.Sprintf("UPDATE %s SET u = u + 100000 WHERE id <= 400", tb),
			fmt.Sprintf("UPDATE %s SET u = IF(u - 100000 = 400, 1, u - 100000 + 1) WHERE id <= 400", tb))
		// Rows deleted, and back with their counter.
		tx(t, p.src, fmt.Sprintf("DELETE FROM %s WHERE id %% 7 = %d", tb, r%7))
		tx(t, p.src, fmt.Sprintf("INSERT INTO %s SELECT seq, %d, seq + 500000 + %d * 10000, 'back' FROM %s WHERE seq %% 7 = %d",
			tb, r, r, dbutil.Table(p.schema, "seq_1_to_400"), r%7))
		// A key moves up and back.
		tx(t, p.src, fmt.Sprintf("UPDATE %s SET id = id + 10000 WHERE id %% 11 = %d", tb, r%11))
		tx(t, p.src, fmt.Sprintf("UPDATE %s SET id = id - 10000, n = n + 1 WHERE id > 10000", tb))
	}
	// One transaction larger than a batch: its heads commit in parallel
	// before its end.
	tx(t, p.src, fmt.Sprintf("INSERT INTO %s SELECT seq, 0, seq, 'late' FROM %s WHERE seq > 400", tb, dbutil.Table(p.schema, "seq_1_to_3000")),
		fmt.Sprintf("UPDATE %s SET n = n + 1000, pad = 'big'", tb))
	end := masterStatus(t, p.src)
	cfg := p.config(t, begin, p.tables(t, "t"))
	cfg.BatchRows = 2000
	cfg.Workers = 4
	tl := start(t, cfg)
	waitFor(t, tl, end)
	st := tl.Stats()
	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	p.same(t, "t", "id")
	if st.Parallel == 0 {
		t.Fatalf("no batch ran in parallel: %+v", st)
	}
	if st.RowsApplied != changes {
		t.Errorf("%d row changes applied, the workload made %d", st.RowsApplied, changes)
	}
	t.Logf("%d batches, %d in parallel, %d lock retries", st.Batches, st.Parallel, st.LockRetries)

	// Replayed from the start over the final state, as after a crash
	// between the parts' commits: the same result.
	cfg = p.config(t, begin, p.tables(t, "t"))
	cfg.BatchRows = 1000
	cfg.Workers = 3
	tl = start(t, cfg)
	waitFor(t, tl, end)
	if err := tl.Stop(); err != nil {
		t.Fatal(err)
	}
	p.same(t, "t", "id")
}

// TestApplyWorkersAB replays one backlog shaped as sysbench
// oltp_write_only's (per transaction: an indexed column's update, another
// column's update, a delete and the insert of the same id) onto a reset
// target, alternating one session and DefaultWorkers sessions, and logs
// each rate. SHARDCTL_BENCH=1 runs it on 200k rows with a 30 s backlog
// (SHARDCTL_BENCH_N rows, SHARDCTL_BENCH_T seconds, SHARDCTL_BENCH_ROUNDS
// rounds); without it, a small backlog checks that both ways converge.
func TestApplyWorkersAB(t *testing.T) {
	rows, secs, rounds := 5000, 1, 1
	if os.Getenv("SHARDCTL_BENCH") != "" {
		rows, secs, rounds = 200000, 30, 3
		for env, v := range map[string]*int{"SHARDCTL_BENCH_N": &rows, "SHARDCTL_BENCH_T": &secs, "SHARDCTL_BENCH_ROUNDS": &rounds} {
			if s := os.Getenv(env); s != "" {
				fmt.Sscan(s, v)
			}
		}
	}
	const ddl = "CREATE TABLE t (id INT NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k))"
	p := newPair(t, "bl_ab", ddl)
	src, dst := dbutil.Table(p.schema, "t"), dbutil.Table(p.target(), "t")
	seed := fmt.Sprintf("SELECT seq, seq %% 1000, REPEAT(CHAR(65 + seq %% 26), 119), REPEAT('p', 59) FROM %s", dbutil.Table(p.schema, fmt.Sprintf("seq_1_to_%d", rows)))
	exec(t, p.src, "INSERT INTO "+src+" "+seed)
	begin := masterStatus(t, p.src)
	var wg sync.WaitGroup
	var txns atomic.Int64
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := uint64(w + 1)
			next := func() int { r = r*6364136223846793005 + 1442695040888963407; return int(r>>33)%rows + 1 }
			for time.Now().Before(deadline) {
				id := next()
				if err := txErr(p.src,
					fmt.Sprintf("UPDATE %s SET k = k + 1 WHERE id = %d", src, next()),
					fmt.Sprintf("UPDATE %s SET c = REPEAT(CHAR(65 + %d %% 26), 119) WHERE id = %d", src, w, next()),
					fmt.Sprintf("DELETE FROM %s WHERE id = %d", src, id),
					fmt.Sprintf("INSERT INTO %s (id, k, c, pad) VALUES (%d, %d, 'x', 'y')", src, id, id%1000)); err != nil {
					t.Error(err)
					return
				}
				txns.Add(1)
			}
		}(w)
	}
	wg.Wait()
	end := masterStatus(t, p.src)
	srcRate := float64(txns.Load()) / float64(secs)
	for round := 0; round < rounds; round++ {
		for _, workers := range []int{1, DefaultWorkers} {
			exec(t, p.dst, "TRUNCATE TABLE "+dst)
			exec(t, p.dst, "INSERT INTO "+dst+" "+strings.ReplaceAll(seed, dbutil.QuoteIdent(p.schema)+".", dbutil.QuoteIdent(p.target())+"."))
			cfg := p.config(t, begin, p.tables(t, "t"))
			cfg.Workers = workers
			var prof *os.File
			if f := os.Getenv("SHARDCTL_BENCH_PROFILE"); f != "" && workers > 1 {
				// The replay alone: the backlog's writers ran before it.
				var err error
				if prof, err = os.Create(fmt.Sprintf("%s.%d", f, round+1)); err != nil {
					t.Fatal(err)
				}
				if err := pprof.StartCPUProfile(prof); err != nil {
					t.Fatal(err)
				}
			}
			t0, cpu0 := time.Now(), cpuSeconds()
			tl := start(t, cfg)
			waitFor(t, tl, end)
			took, cpu := time.Since(t0), cpuSeconds()-cpu0
			if prof != nil {
				pprof.StopCPUProfile()
				prof.Close()
			}
			st := tl.Stats()
			if err := tl.Stop(); err != nil {
				t.Fatal(err)
			}
			p.same(t, "t", "id")
			t.Logf("round %d, %d session(s): %d row events in %.2f s: %.0f/s (%.1fx the source's %.0f txn/s), the tail's CPU %.2f s; %d batches, %d parallel, %d lock retries",
				round+1, workers, st.Events, took.Seconds(), float64(st.Events)/took.Seconds(), float64(secs)/took.Seconds(), srcRate, cpu, st.Batches, st.Parallel, st.LockRetries)
		}
	}
}

// cpuSeconds is this process's CPU time, user and system.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// txChanges runs statements in one source transaction and returns the rows
// they changed.
func txChanges(t testing.TB, db *sql.DB, stmts ...string) int64 {
	t.Helper()
	var n int64
	err := dbutil.InTx(context.Background(), db, func(tx *sql.Tx) error {
		for _, s := range stmts {
			res, err := tx.Exec(testenv.SQL(s))
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
