package verify

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
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
// rows, rounded up to a thousand) on servers 1 and 2. The ids come from a
// join of two short sequences: MySQL's stand-in for seq_1_to_N is a
// recursive CTE, 1,000 levels deep at most.
func sysbenchPair(b *testing.B, rows int) (int, pair) {
	if n, err := strconv.Atoi(os.Getenv("SHARDCTL_BENCH_ROWS")); err == nil && n > 0 {
		rows = n
	}
	rows = (rows + 999) / 1000 * 1000
	p := newPair(b,
		"CREATE TABLE sbtest1 (id INT NOT NULL, k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', PRIMARY KEY (id), KEY k_1 (k)) ENGINE=InnoDB",
		"INSERT INTO sbtest1 SELECT id, FLOOR(RAND(id) * "+strconv.Itoa(rows)+"), SUBSTRING(REPEAT(CONCAT(LPAD(id * 7919 % 99999999999, 11, '0'), '-'), 10), 1, 119),"+
			" SUBSTRING(REPEAT(CONCAT(LPAD(id * 104729 % 99999999999, 11, '0'), '-'), 5), 1, 59)"+
			" FROM (SELECT b.seq * 1000 + a.seq AS id FROM (SELECT seq FROM seq_1_to_1000) a, (SELECT seq FROM seq_0_to_"+strconv.Itoa(rows/1000-1)+") b) ids",
	)
	return rows, p
}

// BenchmarkVerifyBounds measures where verify's time goes on a 1M-row
// sysbench-like table (SHARDCTL_BENCH_ROWS changes the size) and compares
// the bounds found by chunk.Upper with the stepped ones (stride.go), in
// CPU seconds of each server and of this process, which a shared machine
// distorts less than wall time: go test ./verify -run '^$' -bench
// VerifyBounds -benchtime 1x (SHARDCTL_BENCH_ROUNDS rounds of each, alternated, default 3).
func BenchmarkVerifyBounds(b *testing.B) {
	t := b
	rows, p := sysbenchPair(b, 1000000)
	env := testenv.Get(t)
	testenv.Flush(t, p.src)
	testenv.Flush(t, p.dst)
	ctx := context.Background()
	tb := p.table(t, "sbtest1")
	type cost struct{ wall, src, dst, self float64 }
	measure := func(f func()) cost {
		w, s, d, me := time.Now(), env.ServerCPU(t, 1), env.ServerCPU(t, 2), testenv.SelfCPU()
		f()
		return cost{time.Since(w).Seconds(), env.ServerCPU(t, 1) - s, env.ServerCPU(t, 2) - d, testenv.SelfCPU() - me}
	}

	// The parts of a chunk on the source alone: the bound query, then the
	// checksum over the same chunks.
	v := p.verifier(0)
	sc, err := v.open(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	var bounds [][]string
	upper := measure(func() {
		var lo []string
		for {
			hi, more, err := chunk.Upper(ctx, sc.src, sc.key, lo, sc.where, sc.whereArgs, v.chunkRows())
			if err != nil {
				t.Fatal(err)
			}
			bounds = append(bounds, hi)
			if !more {
				return
			}
			lo = hi
		}
	})
	// each runs query over every chunk of bounds on the source.
	each := func(query func(rng string, args []any) error) func() {
		return func() {
			var lo []string
			for _, hi := range bounds {
				rng, args, err := sc.key.Range(lo, hi)
				if err == nil {
					err = query(rng, args)
				}
				if err != nil {
					t.Fatal(err)
				}
				lo = hi
			}
		}
	}
	sum := measure(each(func(rng string, args []any) error {
		_, _, err := sc.checksum(ctx, sc.src, v.SourceSchema, rng+" AND "+sc.where, append(args, sc.whereArgs...))
		return err
	}))
	// What reading the rows costs without the row hash: COUNT over a
	// column the index does not hold, so every row is read.
	count := measure(each(func(rng string, args []any) error {
		var n int64
		return sc.src.QueryRowContext(ctx, "SELECT COUNT(c) FROM "+dbutil.Table(v.SourceSchema, "sbtest1")+" FORCE INDEX (PRIMARY) WHERE "+rng, args...).Scan(&n)
	}))
	// What the chunks themselves cost: the same checksum in one statement.
	whole := measure(func() {
		if _, _, err := sc.checksum(ctx, sc.src, v.SourceSchema, sc.where, sc.whereArgs); err != nil {
			t.Fatal(err)
		}
	})
	sc.close()
	t.Logf("source alone, %d chunks: bounds (chunk.Upper) %.2f s wall, server %.2f CPU-s; checksums %.2f s wall, server %.2f CPU-s; COUNT(c) alone %.2f s wall, server %.2f CPU-s; the checksum in one statement %.2f s wall, server %.2f CPU-s",
		len(bounds), upper.wall, upper.src, sum.wall, sum.src, count.wall, count.src, whole.wall, whole.src)

	var got [2][]cost
	for r := 0; r < testenv.EnvInt("SHARDCTL_BENCH_ROUNDS", 3); r++ {
		for i, upperOnly := range []bool{true, false} {
			v := p.verifier(0)
			v.upperOnly = upperOnly
			var res Result
			c := measure(func() {
				if res, err = v.Table(ctx, tb); err != nil {
					t.Fatal(err)
				}
			})
			if res.Rows != int64(rows) || len(res.Mismatches) != 0 {
				t.Fatalf("result %+v", res)
			}
			got[i] = append(got[i], c)
			t.Logf("round %d, %s: %d chunks, %.2f s wall; CPU-s: source %.2f, target %.2f, shardctl %.2f",
				r+1, map[bool]string{true: "chunk.Upper", false: "stepped"}[upperOnly], res.Chunks, c.wall, c.src, c.dst, c.self)
		}
	}
	for i, name := range []string{"chunk.Upper", "stepped"} {
		var s cost
		for _, c := range got[i] {
			s.wall, s.src, s.dst, s.self = s.wall+c.wall, s.src+c.src, s.dst+c.dst, s.self+c.self
		}
		k := float64(len(got[i]))
		t.Logf("%s, mean of %d: %.2f s wall; CPU-s: source %.2f, target %.2f, shardctl %.2f", name, len(got[i]), s.wall/k, s.src/k, s.dst/k, s.self/k)
	}
}
