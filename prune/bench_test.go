package prune

import (
	"context"
	"fmt"
	osexec "os/exec"
	"strconv"
	"strings"
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
	rows := testenv.EnvInt("SHARDCTL_BENCH_ROWS", 500000)
	rounds := testenv.EnvInt("SHARDCTL_BENCH_ROUNDS", 2)
	env := testenv.Get(t)
	db, schema := newSchema(t, "CREATE TABLE sbtest1 (id INT NOT NULL, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id), KEY k_1 (k)) ENGINE=InnoDB")
	load := func() {
		run(t, db, "INSERT INTO "+dbutil.Table(schema, "sbtest1")+
			" SELECT seq, FLOOR(RAND(seq) * ?), SUBSTRING(REPEAT(CONCAT(LPAD(seq * 7919 % 99999999999, 11, '0'), '-'), 10), 1, 119),"+
			" SUBSTRING(REPEAT(CONCAT(LPAD(seq * 104729 % 99999999999, 11, '0'), '-'), 5), 1, 59) FROM "+dbutil.Table(schema, "seq_1_to_"+strconv.Itoa(rows)), rows)
		testenv.Flush(t, db)
	}
	tb := table(t, db, schema, "sbtest1")
	_, errArch := osexec.LookPath("pt-archiver")
	for round := 1; round <= rounds; round++ {
		load()
		cpu := env.ServerCPU(t, 1)
		self := testenv.SelfCPU()
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
			round, el.Round(time.Millisecond), float64(rows)/el.Seconds(), env.ServerCPU(t, 1)-cpu, testenv.SelfCPU()-self)

		if errArch != nil {
			continue
		}
		load()
		cr := sandbox.Creds()
		dsn := fmt.Sprintf("h=127.0.0.1,P=%d,u=%s,p=%s,D=%s,t=sbtest1,A=utf8mb4", env.Addr(1).Port, cr.User, cr.Password, schema)
		cpu = env.ServerCPU(t, 1)
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
			round, el.Round(time.Millisecond), float64(rows)/el.Seconds(), env.ServerCPU(t, 1)-cpu,
			(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds())
	}
}
