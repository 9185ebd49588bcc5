package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// TestServerRestarts runs the tests that crash, stop or restart the source,
// the target or the sharding database's server, one after another, on a
// sandbox of their own (testenv.Own) beside the other tests (alongside):
// most of their time is waiting for a server to come back.
func TestServerRestarts(t *testing.T) {
	alongside(t)
	env := testenv.Own(t, 3)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *testenv.Env)
	}{
		{"DuringTail", serverRestartsDuringTail},
		{"DuringSteps", serverRestartsDuringSteps},
		{"HealInPlace", serverRestartsHealInPlace},
		{"RetryHealsBeyondMoves", retryHealsBeyondMoves},
		{"ShardingDatabaseDownInBlackout", shardingDatabaseDownInBlackout},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, env) })
	}
}

// serverRestartsDuringTail: while a move tails its source (the cutover
// held by a postpone file), the source server, the target server or the
// sharding database's server crashes and comes back. The move either continues or stops with
// exit 3; a resume finishes it, and the load's ledger is clean.
func serverRestartsDuringTail(t *testing.T, env *testenv.Env) {
	st := testenv.NewSubtests(t)
	for _, tc := range []struct {
		name   string
		server int // the sandbox server that restarts
	}{{"source", 2}, {"target", 3}, {"sharding database", 1}} {
		st.Run(tc.name, func(t *testing.T) {
			c := newClusterOn(t, env, "e2e_restart", []int{2}, []int{300})
			postpone := filepath.Join(c.dir, "postpone")
			if err := os.WriteFile(postpone, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			lp := c.startLoad(100, c.keys("moving", 1, 300))
			move := c.command(nil, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "5s")
			move.Args = append(move.Args, "--postpone-cutover-file", postpone)
			var out bytes.Buffer
			move.Stdout, move.Stderr = &out, &out
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
			code := exitWithin(t, done, 3*time.Minute)
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
				t.Fatalf("the move exited %d after the %s restarted; want 0 or 3 (resumable):\n%s", code, tc.name, out.String())
			}
			lp.stop(t)
			c.checkLedger(lp)
			c.wantShardAt(1, 3)
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

// serverRestartsDuringSteps: a move is held (SHARDCTL_FAULT=hold:POINT)
// inside the copy, with the fence installed, or inside the cleanup, while the
// source, the target or the sharding database's server crashes and comes
// back. The move either continues or stops with exit 3 and a resume finishes
// it; the ledger is clean. The held fence outlasts the budget, so that
// attempt must back off (the fence lifted, the shard back online) before a
// later one cuts over.
func serverRestartsDuringSteps(t *testing.T, env *testenv.Env) {
	st := testenv.NewSubtests(t)
	servers := []struct {
		name   string
		server int
	}{{"source", 2}, {"target", 3}, {"sharding database", 1}}
	for _, ph := range []struct {
		name, point string
		args        []string
	}{
		{"copy", "during:copy", []string{"--chunk-rows", "50"}},
		{"fence", "fence:installed", nil},
		{"cleanup", "during:cleanup", []string{"--prune-chunk-rows", "50"}},
	} {
		for _, sv := range servers {
			st.Run(ph.name+"/"+sv.name, func(t *testing.T) {
				started := time.Now()
				c := newClusterOn(t, env, "e2e_restart", []int{2}, []int{300})
				lp := c.startLoad(100, c.keys("moving", 1, 300))
				// --retry-for 0: the run stops at the failure, as the resume below expects
				// (TestServerRestarts/HealInPlace lets it resume itself).
				code, out := restartWhileHeld(t, c, ph.point, sv.server, ph.name == "fence", "", append([]string{"--retry-for", "0"}, ph.args...))
				t.Logf("the move ended with exit %d after the %s restarted during the %s", code, sv.name, ph.name)
				files, _ := filepath.Glob(filepath.Join(c.planDir, "*.json"))
				if len(files) != 1 {
					t.Fatalf("want one plan file, have %v", files)
				}
				switch code {
				case 0:
				case 3:
					t.Logf("the move's output:\n%s", lastLines(out, 4))
					if ph.name == "fence" {
						fenceLifted(t, c, 2)
					}
					p, err := plans.Load(files[0])
					if err != nil {
						t.Fatal(err)
					}
					c.mustRun("plan", "resume", p.ID)
				default:
					t.Fatalf("the move exited %d after the %s restarted; want 0 or 3 (resumable):\n%s", code, sv.name, out)
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
				p, err := plans.Load(files[0])
				if err != nil {
					t.Fatal(err)
				}
				if p.State != plans.StateDone {
					t.Errorf("the plan is %s, want done", p.State)
				}
				if ph.name == "fence" {
					// The first attempt that fenced is the held one.
					var first string
					for _, a := range p.Attempts {
						if !strings.HasPrefix(a.Result, "postponed") {
							first = a.Result
							break
						}
					}
					if !strings.HasPrefix(first, "backed off") {
						t.Errorf("the held fence attempt was not lifted; attempts: %+v", p.Attempts)
					}
				}
				t.Logf("%s restart during the %s: %s", sv.name, ph.name, time.Since(started).Round(100*time.Millisecond))
			})
		}
	}
}

// restartWhileHeld runs a move of shard 1 to server 3 (args added) held at
// point (SHARDCTL_FAULT=hold:POINT), crashes and restarts server while it is
// held, lets it go, and returns its exit code and output. Held at the fence,
// it outlasts the move's 2 s blackout budget, so that attempt backs off.
//
// With waitFor, the hold lasts until the move's output says it (the loss of
// the lock, which the move notices on its own schedule).
func restartWhileHeld(t *testing.T, c *cluster, point string, server int, outlast bool, waitFor string, args []string) (int, string) {
	t.Helper()
	move := append([]string{"move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "2s"}, args...)
	return runHeld(t, c, point, move, func(out *syncBuffer, release func()) {
		heldAt := time.Now()
		restart(t, c.env.Config, server)
		if outlast {
			// Outlast the 2 s budget whatever the restart took.
			time.Sleep(time.Until(heldAt.Add(2500 * time.Millisecond)))
		}
		for deadline := time.Now().Add(time.Minute); waitFor != "" && !strings.Contains(out.String(), waitFor); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the held move never said %q:\n%s", waitFor, out.String())
			}
		}
		release()
	})
}

// runHeld runs shardctl args held at point (SHARDCTL_FAULT=hold:POINT),
// calls atHold once it is held (atHold lets it go on with release, at the
// moment it chooses), and returns its exit code and output.
func runHeld(t *testing.T, c *cluster, point string, args []string, atHold func(out *syncBuffer, release func())) (int, string) {
	t.Helper()
	hold, done, out := startHeld(t, c, point, "", args)
	atHold(out, func() {
		if err := os.Remove(hold); err != nil {
			t.Fatal(err)
		}
	})
	code := exitWithin(t, done, 3*time.Minute)
	return code, out.String()
}

// startHeld starts shardctl args held at point (SHARDCTL_FAULT=hold:POINT,
// with faults added) and returns once it holds there: the hold file
// (removing it lets the run go on), the channel its exit code arrives on,
// and its output.
func startHeld(t *testing.T, c *cluster, point, faults string, args []string) (string, chan int, *syncBuffer) {
	t.Helper()
	hold := filepath.Join(c.dir, "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(hold + ".held")
	cmd := c.command([]string{"SHARDCTL_FAULT=hold:" + point + faults, "SHARDCTL_FAULT_HOLD=" + hold}, args...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	done := make(chan int, 1)
	go func() {
		_ = cmd.Wait()
		done <- cmd.ProcessState.ExitCode()
	}()
	waitHeld(t, hold, point, done, out)
	return hold, done, out
}

// serverRestartsHealInPlace: with the default --retry-for, a move held
// in its copy while the source or the sharding database restarts, or at its
// fence while the target restarts, resumes itself and finishes (exit 0),
// its log naming the retry, the load's ledger clean. With --retry-for 0 the
// same source restart stops it with exit 3, as before.
func serverRestartsHealInPlace(t *testing.T, env *testenv.Env) {
	for _, tc := range []struct {
		name, point string
		server      int
		args        []string
		code        int
		outlast     bool
		waitFor     string
	}{
		// The source's cases are held at salaries' first checkpoint, so the
		// restart always meets a read (see retryHealsBeyondMoves).
		{"copy/source", "copy:salaries", 2, []string{"--chunk-rows", "50"}, 0, false, ""},
		{"copy/sharding database", "during:copy", 1, []string{"--chunk-rows", "50"}, 0, false, lostLock},
		{"fence/sharding database", "fence:installed", 1, nil, 0, false, lostLock},
		{"copy/source/retry-for 0", "copy:salaries", 2, []string{"--chunk-rows", "50", "--retry-for", "0"}, 3, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClusterOn(t, env, "e2e_heal", []int{2}, []int{300})
			lp := c.startLoad(100, c.keys("moving", 1, 300))
			code, out := restartWhileHeld(t, c, tc.point, tc.server, tc.outlast, tc.waitFor, tc.args)
			var retries []string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "retrying in ") {
					retries = append(retries, l)
				}
			}
			retried := len(retries) > 0
			t.Logf("exit %d; retries:\n%s\nthe move's output ends:\n%s", code, strings.Join(retries, "\n"), lastLines(out, 6))
			if code != tc.code {
				t.Fatalf("the move exited %d, want %d:\n%s", code, tc.code, out)
			}
			if retried != (tc.code == 0) {
				t.Errorf("the log names a retry: %v, want %v:\n%s", retried, tc.code == 0, out)
			}
			if code == 3 {
				files, _ := filepath.Glob(filepath.Join(c.planDir, "*.json"))
				p, err := plans.Load(files[0])
				if err != nil {
					t.Fatal(err)
				}
				c.mustRun("plan", "resume", p.ID)
			}
			lp.stop(t)
			c.checkLedger(lp)
			c.wantShardAt(1, 3)
		})
	}
}

// lostLock is what a move logs when it notices it lost its lock.
const lostLock = "lost the operation lock on the sharding database: the run stops safely"

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// fenceLifted fails the test unless the stopped move left shard 1 writable at
// its source: no fence trigger there, no mapping offline.
func fenceLifted(t *testing.T, c *cluster, server int) {
	t.Helper()
	for _, l := range fenceLeft(t, c, server) {
		t.Errorf("the stopped move left shard 1 %s", l)
	}
}

// fenceLeft says what keeps shard 1 from being written: fence triggers or
// the armed fence's table on any of servers, a mapping offline.
func fenceLeft(t *testing.T, c *cluster, servers ...int) []string {
	t.Helper()
	var left []string
	for _, server := range servers {
		left = append(left, fencedIn(t, c, server, c.shards[0].Schema)...)
	}
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range m.ShardMappings(1) {
		if mp.Status == shardmap.Offline {
			left = append(left, fmt.Sprintf("with a mapping offline: %+v", mp))
		}
	}
	return left
}

// fencedIn says what fences schema on server: fence triggers, the armed
// fence's table.
func fencedIn(t *testing.T, c *cluster, server int, schema string) []string {
	t.Helper()
	var left []string
	var n, armed int
	if err := c.db(server).QueryRow("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND TRIGGER_NAME LIKE ?",
		schema, fence.TriggerPrefix+"%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		left = append(left, fmt.Sprintf("fenced on server %d (%d fence triggers in %s)", server, n, schema))
	}
	if err := c.db(server).QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		schema, fence.FenceTable).Scan(&armed); err != nil {
		t.Fatal(err)
	}
	if armed > 0 {
		left = append(left, fmt.Sprintf("fenced on server %d (the armed fence's table %s.%s)", server, schema, fence.FenceTable))
	}
	return left
}

// exitWithin waits for the move's exit code on done, failing the test when
// it neither finished nor stopped within d of the restart.
func exitWithin(t *testing.T, done <-chan int, d time.Duration) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(d):
		t.Fatalf("the move neither finished nor stopped within %s of the restart", d)
		return 0
	}
}
