package verify

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/tables"
)

// TestWritesDuringTheWalkShareSettles keeps writing rows of the source while
// the walk runs; the target gets them only when Settle applies the writes
// logged so far, as a binlog tail that has caught up would. Nearly every
// chunk differs on its first check, yet Settle runs a few times, not once per
// differing chunk; a chunk outside the writes that differs on the target is a
// firm mismatch naming its row, the others end matched or Changing, and the
// Changing ones match once the writes stop and the target catches up (the
// re-check behind the fence).
func TestWritesDuringTheWalkShareSettles(t *testing.T) {
	const rows, written, drift = 20000, 18000, 19500
	p := newPair(t,
		"CREATE TABLE w (id INT PRIMARY KEY, v INT NOT NULL)",
		"INSERT INTO w SELECT seq, seq FROM seq_1_to_"+strconv.Itoa(rows),
	)
	ctx := context.Background()
	src, dst := dbutil.Table(p.sname, "w"), dbutil.Table(p.tname, "w")
	run(t, p.dst, "UPDATE "+dst+" SET v = -1 WHERE id = ?", drift)

	// The writer: each write is logged once the source has committed it.
	var mu sync.Mutex
	var log [][2]int
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 1; wctx.Err() == nil; n++ {
			id := 1 + rand.IntN(written)
			// Not cancelled mid-statement: a write the source committed is logged.
			if _, err := p.src.ExecContext(ctx, "UPDATE "+src+" SET v = ? WHERE id = ?", -n, id); err != nil {
				return
			}
			mu.Lock()
			log = append(log, [2]int{id, -n})
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	})
	defer func() { stop(); wg.Wait() }()
	// settle applies every write logged so far to the target.
	settles := 0
	settle := func(ctx context.Context) error {
		settles++
		mu.Lock()
		todo := log
		log = nil
		mu.Unlock()
		for _, w := range todo {
			if _, err := p.dst.ExecContext(ctx, "UPDATE "+dst+" SET v = ? WHERE id = ?", w[1], w[0]); err != nil {
				return err
			}
		}
		return nil
	}
	// Writes land on most chunks before the walk starts, too.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(log)
		mu.Unlock()
		if n >= 300 || time.Now().After(deadline) {
			break
		}
	}

	v := p.verifier(100)
	v.Settle, v.Narrow = settle, true
	firstDiffer := 0
	v.checked = func(attempt int, differs bool) {
		if attempt == 0 && differs {
			firstDiffer++
		}
	}
	tb := p.table(t, "w")
	res, err := v.Table(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != rows {
		t.Fatalf("%d rows compared, want %d", res.Rows, rows)
	}
	var changing []Chunk
	firm := 0
	for _, c := range res.Mismatches {
		if c.Changing {
			if c.Lo != nil && mustAtoi(t, c.Lo[0]) >= written {
				t.Errorf("chunk %s is Changing but no write landed there", c.Bounds())
			}
			changing = append(changing, c)
			continue
		}
		firm++
		if !inChunk(c, drift) || len(c.Rows) != 1 || c.Rows[0].Key[0] != strconv.Itoa(drift) {
			t.Errorf("firm mismatch %s does not name row %d: %+v", c.Bounds(), drift, c.Rows)
		}
	}
	t.Logf("%d chunks, %d differed on their first check, %d settles, %d Changing", res.Chunks, firstDiffer, settles, len(changing))
	if firm != 1 {
		t.Fatalf("want one firm mismatch (row %d), got %d: %+v", drift, firm, res.Mismatches)
	}
	if firstDiffer < 30 || settles*4 > firstDiffer {
		t.Fatalf("%d chunks differed on their first check, %d settles: want many differing chunks sharing few settles", firstDiffer, settles)
	}
	stop()
	wg.Wait()
	if err := settle(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := v.Recheck(ctx, tb, changing); err != nil || len(again) != 0 {
		t.Fatalf("Changing chunks after the writes stopped and the target caught up: %+v %v", again, err)
	}
}

// TestEveryKeyInExactlyOneChunk makes every row of the copy differ, so each
// chunk differs and is narrowed to its rows: with chunks compared four at a
// time (stepped bounds on an integer key, looked-up bounds on a composite
// one) every key is named exactly once.
func TestEveryKeyInExactlyOneChunk(t *testing.T) {
	p := newPair(t, ordersDDL, ordersRows,
		"CREATE TABLE s (id INT PRIMARY KEY, v INT)",
		"INSERT INTO s SELECT seq * 3, seq FROM seq_1_to_2000")
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "orders")+" SET amount = amount + 1")
	run(t, p.dst, "UPDATE "+dbutil.Table(p.tname, "s")+" SET v = v + 1")
	ctx := context.Background()
	for _, c := range []struct {
		table string
		rows  int
	}{{"orders", 1000}, {"s", 2000}} {
		for _, threads := range []int{1, 4} {
			v := p.verifier(37)
			v.Threads, v.Narrow, v.MaxRows = threads, true, 1000
			res, err := v.Table(ctx, p.table(t, c.table))
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			var his []string
			for _, m := range res.Mismatches {
				for _, d := range m.Rows {
					seen[strings.Join(d.Key, ",")]++
				}
				his = append(his, m.Bounds())
			}
			if res.Rows != int64(c.rows) || len(seen) != c.rows {
				t.Fatalf("%s, %d threads: %d rows, %d keys named in %d of %d chunks", c.table, threads, res.Rows, len(seen), len(res.Mismatches), res.Chunks)
			}
			for k, n := range seen {
				if n != 1 {
					t.Fatalf("%s, %d threads: key %s named %d times (chunks %v)", c.table, threads, k, n, his)
				}
			}
		}
	}
}

// TestCheckpointPassesOnlyFinishedChunks interrupts a walk whose chunks 3
// and 30 differ until a Settle (a target that lags): no checkpoint passes
// chunk 3 before its re-check, and a resume from the last one finds
// everything matching, each row counted once.
func TestCheckpointPassesOnlyFinishedChunks(t *testing.T) {
	p := newPair(t,
		"CREATE TABLE s (id INT PRIMARY KEY, v INT)",
		"INSERT INTO s SELECT seq, seq FROM seq_1_to_2000")
	dst := dbutil.Table(p.tname, "s")
	lag := func() {
		run(t, p.dst, "UPDATE "+dst+" SET v = 0 WHERE id IN (170, 1520)")
	}
	lag()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := []tables.Table{p.table(t, "s")}
	v := p.verifier(50)
	v.Threads = 4
	var saved []Checkpoint
	v.Checkpoint = func(cp Checkpoint) error {
		saved = append(saved, cp)
		return nil
	}
	interrupted := errors.New("interrupted at the settle")
	v.Settle = func(context.Context) error { cancel(); return interrupted }
	if _, err := v.All(ctx, ts); !errors.Is(err, interrupted) {
		t.Fatalf("want the interrupted settle, got %v", err)
	}
	if len(saved) == 0 {
		t.Fatal("no checkpoint before the settle")
	}
	last := saved[len(saved)-1]
	for _, cp := range saved {
		if cp.After == nil || len(cp.After) != 1 || mustAtoi(t, cp.After[0]) >= 170 || len(cp.Partial.Mismatches) != 0 {
			t.Fatalf("a checkpoint passed the unsettled chunk of row 170: %+v", cp)
		}
	}
	if last.Partial.Rows != int64(mustAtoi(t, last.After[0])) {
		t.Fatalf("checkpoint after key %s counts %d rows", last.After[0], last.Partial.Rows)
	}
	settles := 0
	v.From, v.Settle = &last, func(context.Context) error {
		settles++
		run(t, p.dst, "UPDATE "+dst+" SET v = id WHERE id IN (170, 1520)")
		return nil
	}
	res, err := v.All(context.Background(), ts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 2000 || res.Tables != 1 || len(res.Mismatches) != 0 || settles != 1 {
		t.Fatalf("resumed: %+v, %d settles", res, settles)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
