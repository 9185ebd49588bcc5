package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/sandbox"
)

// TestServerRestartsDuringTail: while a move tails its source (the cutover
// held by a postpone file), the source server, the target server or the
// sharding database's server crashes and comes back. The move either continues or stops with
// exit 3; a resume finishes it, and the load's ledger is clean.
func TestServerRestartsDuringTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server int // the sandbox server that restarts
	}{{"source", 2}, {"target", 3}, {"sharding database", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, "e2e_restart", []int{2}, []int{300})
			postpone := filepath.Join(c.dir, "postpone")
			if err := os.WriteFile(postpone, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			lp := c.startLoad(100, c.keys("moving", 1, 300))
			move := c.command(nil, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "5s")
			move.Args = append(move.Args, "--postpone-cutover-file", postpone)
			done := make(chan int, 1)
			if err := move.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = move.Process.Kill() })
			go func() {
				_ = move.Wait()
				done <- move.ProcessState.ExitCode()
			}()
			path := waitPlanStep(t, c.planDir, plans.StepVerify)
			time.Sleep(500 * time.Millisecond)
			restart(t, c.env.Config, tc.server)
			if err := os.Remove(postpone); err != nil {
				t.Fatal(err)
			}
			var code int
			select {
			case code = <-done:
			case <-time.After(3 * time.Minute):
				t.Fatal("the move neither finished nor stopped within 3 minutes of the restart")
			}
			t.Logf("the move ended with exit %d after the %s restarted", code, tc.name)
			switch code {
			case 0:
			case 3:
				p, err := plans.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				c.mustRun("plan", "resume", p.ID)
			default:
				t.Fatalf("the move exited %d after the %s restarted; want 0 or 3 (resumable)", code, tc.name)
			}
			lp.stop(t)
			c.checkLedger(lp)
			m, err := c.store.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if l, _ := m.Location(1); l.Addr() != c.env.Addr(3) {
				t.Errorf("shard 1 is at %s, want %s", l.Addr(), c.env.Addr(3))
			}
		})
	}
}

// restart crashes server i of the shared sandbox and starts it again.
func restart(t *testing.T, cfg sandbox.Config, i int) {
	t.Helper()
	if err := sandbox.Kill(cfg, i); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, _ := sandbox.Status(ctx, cfg); len(st) >= i && !st[i-1].Running {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	upCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := sandbox.Up(upCtx, cfg); err != nil {
		t.Fatalf("restart server %d: %v", i, err)
	}
}
