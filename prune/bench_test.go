package prune

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/watermark"
)

// BenchmarkPrune500k deletes a 500k-row sysbench-like table in chunks of
// 1000 and reports rows/s, next to pt-archiver --purge --limit 1000
// --commit-each --bulk-delete on the same server when it is installed: the
// machine is shared, so only side-by-side figures compare. Run it with
// go test ./prune -run '^$' -bench Prune500k -benchtime 1x
// (SHARDCTL_BENCH_ROWS changes the size, SHARDCTL_BENCH_ROUNDS the rounds,
// default 2).
func BenchmarkPrune500k(b *testing.B) {
	t := b
	rows := envInt("SHARDCTL_BENCH_ROWS", 500000)
	rounds := envInt("SHARDCTL_BENCH_ROUNDS", 2)
	env := testenv.Get(t)
	db, schema := newSchema(t, "CREATE TABLE sbtest1 (id INT NOT NULL, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id), KEY k_1 (k)) ENGINE=InnoDB")
	load := func() {
		run(t, db, "INSERT INTO "+dbutil.Table(schema, "sbtest1")+
			" SELECT seq, FLOOR(RAND(seq) * ?), SUBSTRING(REPEAT(CONCAT(LPAD(seq * 7919 % 99999999999, 11, '0'), '-'), 10), 1, 119),"+
			" SUBSTRING(REPEAT(CONCAT(LPAD(seq * 104729 % 99999999999, 11, '0'), '-'), 5), 1, 59) FROM "+dbutil.Table(schema, "seq_1_to_"+strconv.Itoa(rows)), rows)
		flush(t, db)
	}
	tb := table(t, db, schema, "sbtest1")
	_, errArch := osexec.LookPath("pt-archiver")
	for round := 1; round <= rounds; round++ {
		load()
		cpu := serverCPU(t, env, 1)
		self := selfCPU()
		start := time.Now()
		p := &Pruner{DB: db, Schema: schema, ChunkRows: 1000}
		w, err := p.Table(context.Background(), tb, watermark.Mark{}, func(watermark.Mark) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		if w.Rows != int64(rows) {
			t.Fatalf("deleted %d rows", w.Rows)
		}
		b.ReportMetric(float64(rows)/el.Seconds(), "rows/s")
		t.Logf("round %d: shardctl prune, chunk 1000: %s, %.0f rows/s; CPU s: server %.2f, client %.2f",
			round, el.Round(time.Millisecond), float64(rows)/el.Seconds(), serverCPU(t, env, 1)-cpu, selfCPU()-self)

		if errArch != nil {
			continue
		}
		load()
		cr := sandbox.Creds()
		dsn := fmt.Sprintf("h=127.0.0.1,P=%d,u=%s,p=%s,D=%s,t=sbtest1,A=utf8mb4", env.Addr(1).Port, cr.User, cr.Password, schema)
		cpu = serverCPU(t, env, 1)
		start = time.Now()
		cmd := osexec.Command("pt-archiver", "--source", dsn, "--purge", "--where", "1=1", "--limit", "1000", "--commit-each", "--bulk-delete")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("pt-archiver: %v\n%s", err, strings.TrimSpace(string(out)))
		}
		el = time.Since(start)
		var left int
		if err := db.QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(schema, "sbtest1")).Scan(&left); err != nil || left != 0 {
			t.Fatalf("pt-archiver left %d rows (%v)", left, err)
		}
		t.Logf("round %d: pt-archiver --purge --limit 1000 --commit-each --bulk-delete: %s, %.0f rows/s; CPU s: server %.2f, client %.2f",
			round, el.Round(time.Millisecond), float64(rows)/el.Seconds(), serverCPU(t, env, 1)-cpu,
			(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds())
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// flush waits until the server has written its dirty pages, so loading the
// table is not billed to the run that follows.
func flush(t testing.TB, db *sql.DB) {
	t.Helper()
	var pct, lwm string
	if err := db.QueryRow("SELECT @@innodb_max_dirty_pages_pct, @@innodb_max_dirty_pages_pct_lwm").Scan(&pct, &lwm); err != nil {
		t.Fatal(err)
	}
	run(t, db, "SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0.001, innodb_max_dirty_pages_pct = 0.001")
	defer run(t, db, "SET GLOBAL innodb_max_dirty_pages_pct = "+pct+", innodb_max_dirty_pages_pct_lwm = "+lwm)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var name string
		var dirty int
		if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'").Scan(&name, &dirty); err != nil {
			t.Fatal(err)
		}
		if dirty < 100 {
			return
		}
	}
	t.Log("dirty pages still being flushed after 60 s")
}

// serverCPU is the CPU seconds server i has used (on a shared machine, CPU
// seconds compare better than wall time).
func serverCPU(t testing.TB, env *testenv.Env, i int) float64 {
	b, err := os.ReadFile(filepath.Join(env.Config.Dir, fmt.Sprintf("s%d", i), "mariadbd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(st)[strings.LastIndexByte(string(st), ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // clock ticks; USER_HZ is 100 on Linux
}

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
