package verify

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
)

// BenchmarkVerifyThreads times a verification of a 1M-row sysbench-like
// table (SHARDCTL_BENCH_ROWS) idle at 1, 2 and 4 threads, and under
// SHARDCTL_BENCH_WRITES row updates a second on the source (default 300;
// 0: idle only) that a stand-in tail applies to the target every 5 ms, with
// a Settle that waits for the tail to apply what was written before: settling for
// each differing chunk at once against the shared settles, in CPU seconds
// of each server and of this process beside the wall time: go test
// ./verify -run '^$' -bench VerifyThreads -benchtime 1x -v
// (SHARDCTL_BENCH_ROUNDS rounds, alternated, default 2). The pipeline's
// Settle also reads a fresh source position and (MySQL) waits for the
// source's commit, so this understates what sharing settles saves there.
func BenchmarkVerifyThreads(b *testing.B) {
	t := b
	rows, p := sysbenchPair(b, 1000000)
	env := testenv.Get(t)
	ctx := context.Background()
	tb := p.table(t, "sbtest1")
	src, dst := dbutil.Table(p.sname, "sbtest1"), dbutil.Table(p.tname, "sbtest1")
	rate := testenv.EnvInt("SHARDCTL_BENCH_WRITES", 300)

	// The writer logs each update once the source committed it; the tail
	// applies the log to the target every 5 ms, as the binlog
	// tail does, so the target lags by a batch; a Settle waits until the
	// tail has applied every write logged before it was called.
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var log [][2]int
	logged, applied := 0, 0
	dead := false // the tail stopped on an error: a Settle must not wait for it
	settles := 0
	settle := func(ctx context.Context) error {
		settles++
		mu.Lock()
		defer mu.Unlock()
		for want := logged; applied < want && !dead; {
			cond.Wait()
		}
		if dead {
			return errors.New("the stand-in tail stopped")
		}
		return nil
	}
	// writing starts rate updates a second on the source and the tail; the
	// func it returns stops them once the target has caught up.
	writing := func() func() {
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for n := 1; ; n++ {
				select {
				case <-wctx.Done():
					return
				case <-tick.C:
				}
				id := 1 + rand.IntN(rows)
				if _, err := p.src.ExecContext(ctx, "UPDATE "+src+" SET k = ? WHERE id = ?", -n, id); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				log = append(log, [2]int{id, -n})
				logged++
				mu.Unlock()
			}
		})
		tailDone := make(chan struct{})
		go func() {
			defer close(tailDone)
			for {
				mu.Lock()
				todo := log
				log = nil
				mu.Unlock()
				for _, w := range todo {
					if _, err := p.dst.ExecContext(ctx, "UPDATE "+dst+" SET k = ? WHERE id = ?", w[1], w[0]); err != nil {
						t.Error(err)
						mu.Lock()
						dead = true
						cond.Broadcast()
						mu.Unlock()
						return
					}
				}
				mu.Lock()
				applied += len(todo)
				cond.Broadcast()
				idle := wctx.Err() != nil && len(log) == 0
				mu.Unlock()
				if idle {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		return func() {
			stop()
			wg.Wait()
			<-tailDone
		}
	}

	type variant struct {
		name            string
		threads, settle int // settle: pendingMax, 0 for pendingBound
		writes          bool
	}
	vs := []variant{{"idle, 1 thread", 1, 0, false}, {"idle, 2 threads", 2, 0, false}, {"idle, 4 threads", 4, 0, false}}
	if rate > 0 {
		vs = append(vs, variant{"writes, a settle per differing chunk, 1 thread", 1, 1, true},
			variant{"writes, shared settles, 1 thread", 1, 0, true}, variant{"writes, shared settles, 2 threads", 2, 0, true},
			variant{"writes, shared settles, 4 threads", 4, 0, true})
	}
	type cost struct{ wall, src, dst, self, settles, changing float64 }
	sums := make([]cost, len(vs))
	rounds := testenv.EnvInt("SHARDCTL_BENCH_ROUNDS", 2)
	for r := range rounds {
		for i, vr := range vs {
			v := p.verifier(0)
			v.Threads, v.pendingMax = vr.threads, vr.settle
			var stop func()
			if vr.writes {
				v.Settle = settle
				stop = writing()
			}
			settles = 0
			mu.Lock()
			written := logged
			mu.Unlock()
			w, s, d, me := time.Now(), env.ServerCPU(t, 1), env.ServerCPU(t, 2), testenv.SelfCPU()
			res, err := v.Table(ctx, tb)
			c := cost{time.Since(w).Seconds(), env.ServerCPU(t, 1) - s, env.ServerCPU(t, 2) - d, testenv.SelfCPU() - me, float64(settles), 0}
			mu.Lock()
			written = logged - written
			mu.Unlock()
			if stop != nil {
				stop()
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range res.Mismatches {
				if !m.Changing {
					t.Fatalf("%s: a firm mismatch %+v", vr.name, m)
				}
				c.changing++
			}
			if res.Rows != int64(rows) {
				t.Fatalf("%s: %d rows", vr.name, res.Rows)
			}
			t.Logf("round %d, %s: %d chunks, %.2f s wall; CPU-s: source %.2f, target %.2f, shardctl %.2f; %.0f settles, %.0f chunks Changing; %.0f writes/s",
				r+1, vr.name, res.Chunks, c.wall, c.src, c.dst, c.self, c.settles, c.changing, float64(written)/c.wall)
			s2 := &sums[i]
			s2.wall, s2.src, s2.dst, s2.self, s2.settles, s2.changing = s2.wall+c.wall, s2.src+c.src, s2.dst+c.dst, s2.self+c.self, s2.settles+c.settles, s2.changing+c.changing
		}
	}
	k := float64(rounds)
	for i, vr := range vs {
		s := sums[i]
		t.Logf("%s, mean of %d: %.2f s wall; CPU-s: source %.2f, target %.2f, shardctl %.2f; %.1f settles, %.1f Changing", vr.name, rounds, s.wall/k, s.src/k, s.dst/k, s.self/k, s.settles/k, s.changing/k)
	}
}
