package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
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
