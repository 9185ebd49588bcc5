package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/watermark"
)

func TestHasAutoInc(t *testing.T) {
	f := newFixture(t,
		"CREATE TABLE ai (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT)",
		"CREATE TABLE plain (id BIGINT NOT NULL PRIMARY KEY, v INT)",
		"CREATE TABLE aikey (a INT NOT NULL, id INT NOT NULL AUTO_INCREMENT, PRIMARY KEY (a, id), KEY (id))",
	)
	ctx := context.Background()
	for table, want := range map[string]bool{"ai": true, "plain": false, "aikey": true, "absent": false} {
		got, err := hasAutoInc(ctx, f.src, f.sname, table)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("hasAutoInc(%s) = %v, want %v", table, got, want)
		}
	}
}

// TestInTurn: writers holding a turn never write at once, every chunk that
// succeeds is committed, and a chunk that fails is rolled back and gives the
// turn back.
func TestInTurn(t *testing.T) {
	f := newFixture(t, "CREATE TABLE w (id INT NOT NULL PRIMARY KEY, writer INT NOT NULL)")
	ctx := context.Background()
	tbl := dbutil.Table(f.sname, "w")
	turn := make(chan struct{}, 1)
	var inside, most atomic.Int32
	const writers, chunks = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			conn, err := f.src.Conn(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			for c := range chunks {
				err := inTurn(ctx, conn, turn, func() error {
					n := inside.Add(1)
					defer inside.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(2 * time.Millisecond) // gives the other writers a chance to overlap, were the turn not held
					_, err := conn.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES (?, ?)", w*100+c, w)
					return err
				})
				if err != nil {
					errs <- fmt.Errorf("writer %d chunk %d: %w", w, c, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d writers wrote at once while taking turns", m)
	}
	if n := count(t, f.src, f.sname, "w"); n != writers*chunks {
		t.Errorf("%d rows committed, want %d", n, writers*chunks)
	}

	conn, err := f.src.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	boom := errors.New("boom")
	err = inTurn(ctx, conn, turn, func() error {
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES (999, 9)"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("inTurn returned %v, want the write's error", err)
	}
	if n := count(t, f.src, f.sname, "w"); n != writers*chunks {
		t.Errorf("the failed chunk's row was committed: %d rows", n)
	}
	done := make(chan error, 1)
	go func() {
		done <- inTurn(ctx, conn, turn, func() error {
			_, err := conn.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES (998, 9)")
			return err
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the turn was not given back after a failed chunk")
	}
}

// TestWriterGroupsWaitingChunks: a writer that takes turns loads the chunks
// waiting behind its own in the same LOAD DATA (at most groupChunks), every
// chunk still counts in the watermark, and a group that meets rows already
// on the target is loaded again with REPLACE, as a single chunk is. Without
// turns each chunk goes alone.
func TestWriterGroupsWaitingChunks(t *testing.T) {
	f := newFixture(t, "CREATE TABLE g (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20) NOT NULL)")
	ctx := context.Background()
	setLocalInfile(t, f.dst, 1)
	c := f.copier()
	ts := f.tables(t)
	if err := c.CreateTables(ctx, ts); err != nil {
		t.Fatal(err)
	}
	cols := []chunk.Column{{Name: "id"}, {Name: "v"}}
	const chunks, per = 6, 10
	// run writes the chunks through one writer and returns how many LOAD
	// DATA statements it sent and the watermark it reached.
	run := func(turns bool, value string) (int, watermark.Mark) {
		ch := make(chan batch, chunks)
		for i := range chunks {
			var data []byte
			for id := i*per + 1; id <= (i+1)*per; id++ {
				data = fmt.Appendf(data, "%d\t%s\n", id, value)
			}
			ch <- batch{seq: i, rows: per, data: &data, last: []string{strconv.Itoa((i + 1) * per)}}
		}
		close(ch)
		loads := 0
		w := &writer{ncols: 2, load: func(name string, replace bool) string {
			loads++
			return c.loadText("g", cols, "binary", name, replace)
		}}
		if turns {
			w.turn = make(chan struct{}, 1)
		}
		tr := newTracker(watermark.Mark{}, "g", nil, nil)
		if err := c.write(ctx, ch, w, tr); err != nil {
			t.Fatal(err)
		}
		if err := tr.ended(0, chunks); err != nil {
			t.Fatal(err)
		}
		return loads, tr.lastSaved()
	}
	check := func(what string, loads, want int, wm watermark.Mark, value string) {
		t.Helper()
		if loads != want {
			t.Errorf("%s: %d LOAD DATA statements, want %d", what, loads, want)
		}
		if wm.Rows != chunks*per || len(wm.After) != 1 || wm.After[0] != strconv.Itoa(chunks*per) {
			t.Errorf("%s: watermark %+v, want %d rows after %d", what, wm, chunks*per, chunks*per)
		}
		var n, odd int
		if err := f.dst.QueryRow("SELECT COUNT(*), SUM(v <> ?) FROM "+dbutil.Table(f.tname, "g"), value).Scan(&n, &odd); err != nil {
			t.Fatal(err)
		}
		if n != chunks*per || odd != 0 {
			t.Errorf("%s: %d rows on the target, %d of them not %q", what, n, odd, value)
		}
	}
	loads, wm := run(true, "first")
	check("taking turns", loads, 2, wm, "first") // 4 chunks, then the other 2
	loads, wm = run(true, "second")
	check("taking turns over rows already there", loads, 4, wm, "second") // each group again with REPLACE
	exec(t, f.dst, "TRUNCATE TABLE "+dbutil.Table(f.tname, "g"))
	loads, wm = run(false, "third")
	check("without turns", loads, chunks, wm, "third")
}
