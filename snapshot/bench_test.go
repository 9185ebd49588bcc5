package snapshot

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/watermark"
)

// BenchmarkCopySysbench1M copies a 1M-row sysbench-like table from server 1
// to server 2 and reports rows/s, next to mydumper -t 2 | myloader -t 2 -e
// (binlog on, as the copy has it) on the same servers when they are
// installed: the machine is shared, so only side-by-side figures compare.
// Run it with go test ./snapshot -run '^$' -bench CopySysbench1M -benchtime 1x;
// SHARDCTL_BENCH_ROWS changes the size,
// SHARDCTL_BENCH_WRITERS the writers per table (default: the copy's, by flavor),
// SHARDCTL_BENCH_ROUNDS the rounds (default 2); SHARDCTL_BENCH_INSERT=1
// writes with INSERTs instead of LOAD DATA, SHARDCTL_BENCH_INDEXES_FIRST=1
// creates the secondary indexes with the table, SHARDCTL_BENCH_READERS sets
// the readers per table (default 1), SHARDCTL_BENCH_CHUNK the rows per chunk
// (default 5000; a list such as 5000,20000 takes turns by round),
// SHARDCTL_BENCH_GROUP the chunks one LOAD DATA may carry where the writers
// take turns (groupChunks; a list takes turns by round too), SHARDCTL_BENCH_CONCURRENT_AUTOINC=1 lets
// the writers write at once (see hasAutoInc), SHARDCTL_BENCH_DURABLE=1 makes
// the target durable (innodb_flush_log_at_trx_commit = 1, sync_binlog = 1,
// for both tools); SHARDCTL_BENCH_FLOOR=1 adds the target's floor to each
// round (floorRound); SHARDCTL_BENCH_NO_TOOLS=1 leaves out
// mydumper and myloader.
func BenchmarkCopySysbench1M(b *testing.B) {
	t := b
	rows := testenv.EnvInt("SHARDCTL_BENCH_ROWS", 1000000)
	writers := testenv.EnvInt("SHARDCTL_BENCH_WRITERS", (&Copier{}).writers(testenv.MySQL()))
	rounds := testenv.EnvInt("SHARDCTL_BENCH_ROUNDS", 2)
	f := newFixture(t,
		"CREATE TABLE sbtest1 (id INT NOT NULL AUTO_INCREMENT, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id), KEY k_1 (k)) ENGINE=InnoDB",
	)
	start := time.Now()
	conn, err := f.src.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if testenv.MySQL() { // seq_1_to_N is a recursive CTE there (testenv.SQL)
		if _, err := conn.ExecContext(context.Background(), "SET SESSION cte_max_recursion_depth = ?", rows+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.ExecContext(context.Background(), testenv.SQL("INSERT INTO "+dbutil.Table(f.sname, "sbtest1")+
		" SELECT seq, FLOOR(RAND(seq) * ?), SUBSTRING(REPEAT(CONCAT(LPAD(seq * 7919 % 99999999999, 11, '0'), '-'), 10), 1, 119),"+
		" SUBSTRING(REPEAT(CONCAT(LPAD(seq * 104729 % 99999999999, 11, '0'), '-'), 5), 1, 59) FROM "+dbutil.Table(f.sname, "seq_1_to_"+strconv.Itoa(rows))), rows); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	t.Logf("loaded %d rows in %s", rows, time.Since(start).Round(time.Millisecond))
	if os.Getenv("SHARDCTL_BENCH_DURABLE") == "1" {
		var flush, sync string
		if err := f.dst.QueryRow("SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog").Scan(&flush, &sync); err != nil {
			t.Fatal(err)
		}
		exec(t, f.dst, "SET GLOBAL innodb_flush_log_at_trx_commit = 1, sync_binlog = 1")
		defer exec(t, f.dst, "SET GLOBAL innodb_flush_log_at_trx_commit = "+flush+", sync_binlog = "+sync)
	}
	ctx := context.Background()
	ts := f.tables(t)
	env := testenv.Get(t)
	_, errDump := osexec.LookPath("mydumper")
	_, errLoad := osexec.LookPath("myloader")
	for round := 1; round <= rounds; round++ {
		exec(t, f.dst, "DROP DATABASE IF EXISTS "+dbutil.QuoteIdent(f.tname))
		c := f.copier()
		c.Writers = writers
		c.NoLoadData = os.Getenv("SHARDCTL_BENCH_INSERT") == "1"
		c.IndexesFirst = os.Getenv("SHARDCTL_BENCH_INDEXES_FIRST") == "1"
		c.ConcurrentAutoInc = os.Getenv("SHARDCTL_BENCH_CONCURRENT_AUTOINC") == "1"
		c.Readers = testenv.EnvInt("SHARDCTL_BENCH_READERS", defaultReaders)
		if gs := strings.Split(os.Getenv("SHARDCTL_BENCH_GROUP"), ","); gs[0] != "" {
			groupChunks, _ = strconv.Atoi(gs[(round-1)%len(gs)])
		}
		if sizes := strings.Split(os.Getenv("SHARDCTL_BENCH_CHUNK"), ","); sizes[0] != "" {
			c.ChunkRows, _ = strconv.Atoi(sizes[(round-1)%len(sizes)])
		}
		if err := c.CreateTables(ctx, ts); err != nil {
			t.Fatal(err)
		}
		testenv.Flush(t, f.src)
		testenv.Flush(t, f.dst)
		cpu := startCPU(t, env)
		start := time.Now()
		// The last chunk's commit ends the rows phase; the rest is the index build.
		var rowsDone atomic.Int64
		c.Progress = func(string, int64) { rowsDone.Store(int64(time.Since(start))) }
		wm, err := c.CopyTable(ctx, table(t, ts, "sbtest1"), watermark.Mark{}, func(watermark.Mark) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		if wm.Rows != int64(rows) || count(t, f.dst, f.tname, "sbtest1") != int64(rows) {
			t.Fatalf("copied %d rows", wm.Rows)
		}
		b.ReportMetric(float64(rows)/el.Seconds(), "rows/s")
		rowsEl := time.Duration(rowsDone.Load())
		t.Logf("round %d: shardctl copy (insert %v, indexes first %v, %d readers, writers of an AUTO_INCREMENT table at once forced %v), chunk %d, group %d, %d writers: %s (rows %s, indexes %s), %.0f rows/s; CPU s: %s", round, c.NoLoadData, c.IndexesFirst, c.Readers, c.ConcurrentAutoInc, c.chunkRows(), groupChunks, writers, el.Round(time.Millisecond), rowsEl.Round(time.Millisecond), (el - rowsEl).Round(time.Millisecond), float64(rows)/el.Seconds(), cpu.stop(0))

		if os.Getenv("SHARDCTL_BENCH_FLOOR") == "1" {
			floorRound(t, f, env, round, rows)
		}
		if errDump != nil || errLoad != nil || os.Getenv("SHARDCTL_BENCH_NO_TOOLS") == "1" {
			continue
		}
		exec(t, f.dst, "DROP DATABASE IF EXISTS "+dbutil.QuoteIdent(f.tname))
		dir := t.TempDir()
		out := filepath.Join(dir, "dump")
		cr := sandbox.Creds()
		testenv.Flush(t, f.dst)
		cpu = startCPU(t, env)
		start = time.Now()
		tools := run(t, "mydumper", "-h", "127.0.0.1", "-P", strconv.Itoa(env.Addr(1).Port), "-u", cr.User, "-p", cr.Password,
			"-B", f.sname, "-t", "2", "-r", "100000", "--trx-consistency-only", "-o", out)
		dumped := time.Since(start)
		tools += run(t, "myloader", "-h", "127.0.0.1", "-P", strconv.Itoa(env.Addr(2).Port), "-u", cr.User, "-p", cr.Password,
			"-d", out, "-s", f.sname, "-B", f.tname, "-t", "2", "-e", "-o")
		el = time.Since(start)
		if n := count(t, f.dst, f.tname, "sbtest1"); n != int64(rows) {
			t.Fatalf("myloader loaded %d rows", n)
		}
		t.Logf("round %d: mydumper -t 2 + myloader -t 2 -e: %s (dump %s), %.0f rows/s; CPU s: %s", round, el.Round(time.Millisecond), dumped.Round(time.Millisecond), float64(rows)/el.Seconds(), cpu.stop(tools))
	}
}

// run runs a tool and returns the CPU seconds it used.
func run(t testing.TB, name string, args ...string) float64 {
	t.Helper()
	cmd := osexec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, strings.TrimSpace(string(out)))
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

// cpuMeter reads the CPU time of servers 1 and 2 and of this process: on a
// shared machine, CPU seconds compare better than wall time.
type cpuMeter struct {
	t        testing.TB
	env      *testenv.Env
	src, dst float64
	self     float64
}

func startCPU(t testing.TB, env *testenv.Env) *cpuMeter {
	return &cpuMeter{t: t, env: env, src: env.ServerCPU(t, 1), dst: env.ServerCPU(t, 2), self: testenv.SelfCPU()}
}

// stop reports source, target and client CPU seconds; tools is CPU used by child processes.
func (m *cpuMeter) stop(tools float64) string {
	client := testenv.SelfCPU() - m.self
	if tools > 0 {
		client = tools
	}
	return fmt.Sprintf("source %.2f, target %.2f, client %.2f", m.env.ServerCPU(m.t, 1)-m.src, m.env.ServerCPU(m.t, 2)-m.dst, client)
}

// floorRound measures what the copy's end state costs the target by itself:
// the same rows, read beforehand, in one LOAD DATA LOCAL statement of one
// session into an empty table without its secondary index, then the
// server's own ADD KEY; the copy's writers send the same text.
func floorRound(t *testing.B, f fixture, env *testenv.Env, round, rows int) {
	ctx := context.Background()
	var data []byte
	raw, dest := dbutil.Dest[sql.RawBytes](4)
	n := 0
	err := dbutil.ScanEach(ctx, f.src, "SELECT id, k, c, pad FROM "+dbutil.Table(f.sname, "sbtest1")+" ORDER BY id", nil, dest, func() error {
		for i, v := range raw {
			if i > 0 {
				data = append(data, '\t')
			}
			data = appendField(data, v)
		}
		data = append(data, '\n')
		n++
		return nil
	})
	if err != nil || n != rows {
		t.Fatalf("read %d rows: %v", n, err)
	}
	exec(t, f.dst, "DROP DATABASE IF EXISTS "+dbutil.QuoteIdent(f.tname))
	exec(t, f.dst, "CREATE DATABASE "+dbutil.QuoteIdent(f.tname))
	exec(t, f.dst, "CREATE TABLE "+dbutil.Table(f.tname, "sbtest1")+" (id INT NOT NULL AUTO_INCREMENT, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id)) ENGINE=InnoDB")
	mysql.RegisterReaderHandler("floor", func() io.Reader { return bytes.NewReader(data) })
	defer mysql.DeregisterReaderHandler("floor")
	testenv.Flush(t, f.dst)
	cpu := startCPU(t, env)
	start := time.Now()
	exec(t, f.dst, "LOAD DATA LOCAL INFILE 'Reader::floor' INTO TABLE "+dbutil.Table(f.tname, "sbtest1")+" CHARACTER SET binary")
	loaded := time.Since(start)
	exec(t, f.dst, "ALTER TABLE "+dbutil.Table(f.tname, "sbtest1")+" ADD KEY k_1 (k)")
	el := time.Since(start)
	t.Logf("round %d: floor, one LOAD DATA of the rows then ADD KEY: %s (rows %s, index %s); CPU s: %s", round, el.Round(time.Millisecond), loaded.Round(time.Millisecond), (el - loaded).Round(time.Millisecond), cpu.stop(0))
}
