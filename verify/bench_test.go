package verify

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
)

// BenchmarkVerifySysbench1M verifies a 1M-row sysbench-like table held by
// servers 1 and 2 and reports rows/s: go test ./verify -run '^$' -bench
// VerifySysbench1M -benchtime 1x (SHARDCTL_BENCH_ROWS changes the size).
func BenchmarkVerifySysbench1M(b *testing.B) {
	t := b
	rows, p := sysbenchPair(b, 1000000)
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "sbtest1")+" SET pad = 'x' WHERE id = ?", rows/2)
	v := p.verifier(0)
	start := time.Now()
	res, err := v.Table(context.Background(), p.table(t, "sbtest1"))
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if res.Rows != int64(rows) || len(res.Mismatches) != 1 {
		t.Fatalf("result %+v", res)
	}
	b.ReportMetric(float64(rows)/el.Seconds(), "rows/s")
	t.Logf("verify %d rows, chunk %d: %s, %.0f rows/s, %d chunks", rows, defaultChunkRows, el.Round(time.Millisecond), float64(rows)/el.Seconds(), res.Chunks)
}

// BenchmarkNarrowAndRepair measures what naming and repairing rows costs on
// top of the chunk checksums: a sysbench-like table of SHARDCTL_BENCH_ROWS
// rows (default 200000) whose copy has one row in 200 changed, so every
// chunk differs and is read again row by row: go test ./verify -run '^$'
// -bench NarrowAndRepair -benchtime 1x.
func BenchmarkNarrowAndRepair(b *testing.B) {
	t := b
	rows, p := sysbenchPair(b, 200000)
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "sbtest1")+" SET pad = 'x' WHERE id % 200 = 0")
	ctx := context.Background()
	tb := p.table(t, "sbtest1")
	timed := func(what string, narrow bool) Result {
		v := p.verifier(0)
		v.Narrow, v.MaxRows = narrow, 1000
		start := time.Now()
		res, err := v.Table(ctx, tb)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d rows, %d differing chunks: %s", what, res.Rows, len(res.Mismatches), time.Since(start).Round(time.Millisecond))
		return res
	}
	timed("chunks only", false)
	res := timed("chunks and rows", true)
	start := time.Now()
	done, err := p.verifier(0).Repair(ctx, tb, res.Mismatches)
	if err != nil || done.Written != int64(rows/200) {
		t.Fatalf("repair: %+v %v", done, err)
	}
	t.Logf("repair: %d rows written: %s", done.Written, time.Since(start).Round(time.Millisecond))
	if again := timed("after the repair", true); len(again.Mismatches) != 0 {
		t.Fatalf("after the repair: %+v", again.Mismatches)
	}
}

// sysbenchPair is a sysbench-like table of SHARDCTL_BENCH_ROWS rows (else
// rows) on servers 1 and 2.
func sysbenchPair(b *testing.B, rows int) (int, pair) {
	if n, err := strconv.Atoi(os.Getenv("SHARDCTL_BENCH_ROWS")); err == nil && n > 0 {
		rows = n
	}
	p := newPair(b,
		"CREATE TABLE sbtest1 (id INT NOT NULL, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id), KEY k_1 (k)) ENGINE=InnoDB",
		"INSERT INTO sbtest1 SELECT seq, FLOOR(RAND(seq) * "+strconv.Itoa(rows)+"), SUBSTRING(REPEAT(CONCAT(LPAD(seq * 7919 % 99999999999, 11, '0'), '-'), 10), 1, 119),"+
			" SUBSTRING(REPEAT(CONCAT(LPAD(seq * 104729 % 99999999999, 11, '0'), '-'), 5), 1, 59) FROM seq_1_to_"+strconv.Itoa(rows),
	)
	return rows, p
}
