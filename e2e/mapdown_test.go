package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/router"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// shardingDatabaseDownInBlackout (TestServerRestarts): a move is held (hold:after:fence) at
// the heart of its blackout, the source fenced, the moving mappings offline,
// the final position recorded, the shard map not yet switched; the sharding
// database's server is killed (SIGKILL) or frozen (SIGSTOP), the move let go
// at once, and the server back 3 s later. shardctl keeps the fence (it
// cannot tell whether a switch it sent committed until it reads the map) and
// retries the switch within --retry-for (a frozen server may simply hold
// the switch until it thaws): the move finishes by itself, the ledger is
// clean. With --retry-for 0 it exits 3 saying the shard stays
// fenced and naming the resume; until then a router whose cached map
// predates the failed switch writes nowhere (the fence turns it away, the
// map says offline), and after the resume it writes to the target.
func shardingDatabaseDownInBlackout(t *testing.T, env *testenv.Env) {
	st := testenv.NewSubtests(t)
	for _, tc := range []struct {
		name   string
		freeze bool
		code   int
	}{
		{"kill", false, 0},
		{"freeze", true, 0},
		{"kill/retry-for 0", false, 3},
	} {
		st.Run(tc.name, func(t *testing.T) {
			c := newClusterOn(t, env, "e2e_mapdown", []int{2}, []int{300})
			lp := c.startLoad(100, c.keys("moving", 1, 300))
			key, stale := staleRouter(t, c, 2*time.Second)
			args := []string{"move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "2s"}
			if tc.code == 3 {
				args = append(args, "--retry-for", "0")
			}
			code, out := runHeld(t, c, "after:fence", args, func(_ *syncBuffer, release func()) {
				if err := setLastName(ctx, c.db(2), c.shards[0].Schema, key, "direct"); err == nil {
					t.Error("a write to the source went through with the fence step done")
				}
				outage(t, c.env.Config, 1, tc.freeze, 3*time.Second, release)
			})
			t.Logf("exit %d; the move's output ends:\n%s", code, lastLines(out, 6))
			if code != tc.code {
				t.Fatalf("the move exited %d, want %d:\n%s", code, tc.code, out)
			}
			files := planFiles(t, c.planDir)
			if code == 3 {
				for _, want := range []string{"stays fenced", "shardctl plan resume"} {
					if !strings.Contains(out, want) {
						t.Errorf("the stopped move's output does not say %q:\n%s", want, out)
					}
				}
				stillFenced(t, c, key)
				err := setLastNameVia(stale, key, "stale-before")
				if err == nil {
					t.Error("a router with a map cached before the failed switch wrote while the shard was fenced and offline")
				}
				t.Logf("the stale router's write before the resume: %v", err)
				p, err := plans.Load(files[0])
				if err != nil {
					t.Fatal(err)
				}
				c.mustRun("plan", "resume", p.ID)
			} else if !tc.freeze && !strings.Contains(out, "retrying in ") {
				// A frozen server may just hold the switch until it thaws: no retry then.
				t.Errorf("the move healed without a retry in its log:\n%s", out)
			}
			lp.stop(t)
			c.checkLedger(lp)
			c.wantShardAt(1, 3)
			p, err := plans.Load(files[0])
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("blackout %.0f ms (the fault: %s)", p.Result.BlackoutMS, "3 s")
			// The router still trusts its map from before the move: the fence
			// turns it away from the source, and it finds the target.
			if err := setLastNameVia(stale, key, "stale-after"); err != nil {
				t.Fatalf("the stale router's write after the move: %v", err)
			}
			if got := lastName(t, c.db(3), c.shards[0].Schema, key); got != "stale-after" {
				t.Errorf("the target has last_name %q for %d, want the stale router's write", got, key)
			}
		})
	}
}

// outage takes server i of the sandbox away, calls release (the held run
// meets the outage), and brings it back after d: killed (SIGKILL) and
// started again, or with freeze frozen (SIGSTOP) and thawed (SIGCONT).
func outage(t *testing.T, cfg sandbox.Config, i int, freeze bool, d time.Duration, release func()) {
	t.Helper()
	st, err := sandbox.Status(ctx, cfg)
	if err != nil || len(st) < i {
		t.Fatalf("sandbox status: %v", err)
	}
	pid := st[i-1].PID
	if freeze {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		release()
		time.Sleep(d)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := sandbox.Kill(cfg, i); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st, _ := sandbox.Status(ctx, cfg); !st[i-1].Running {
			break
		}
	}
	release()
	time.Sleep(d)
	upCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := sandbox.Up(upCtx, cfg); err != nil {
		t.Fatalf("restart server %d: %v", i, err)
	}
}

// stillFenced fails the test unless shard 1 is as a stopped cutover must
// leave it: fenced at its source (a write there is refused), its mappings
// offline, the map still locating it at the source.
func stillFenced(t *testing.T, c *cluster, key int64) {
	t.Helper()
	if err := setLastName(ctx, c.db(2), c.shards[0].Schema, key, "direct"); err == nil {
		t.Error("a write to the source went through after the switch failed")
	}
	wantMappings(t, c, 1, shardmap.Offline)
	c.wantShardAt(1, 2)
}

// staleRouter returns a key of shard 1 below the load's keys and a router
// that has cached the map for it and trusts its cache for an hour: its
// writes go where the map said at the start, until a fence or a missing
// table sends it to read the map again (retrying for retryFor).
func staleRouter(t *testing.T, c *cluster, retryFor time.Duration) (int64, *router.Router) {
	t.Helper()
	key := c.shards[0].Lower + 1
	r := router.New(c.store, router.Options{Creds: sandbox.Creds(), TTL: time.Hour, RetryFor: retryFor})
	t.Cleanup(r.Close)
	if _, err := r.Resolve(ctx, "employees", fmt.Sprint(key)); err != nil {
		t.Fatal(err)
	}
	return key, r
}

// wantMappings fails the test unless every mapping of shard id has status.
func wantMappings(t *testing.T, c *cluster, id int, status string) {
	t.Helper()
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range m.ShardMappings(id) {
		if mp.Status != status {
			t.Errorf("a mapping of shard %d is %s, want %s", id, mp.Status, status)
		}
	}
}

func setLastName(ctx context.Context, db dbutil.Querier, schema string, key int64, name string) error {
	_, err := db.ExecContext(ctx, "UPDATE "+dbutil.Table(schema, "employees")+" SET last_name = ? WHERE emp_no = ?", name, key)
	return err
}

// setLastNameVia writes through router r.
func setLastNameVia(r *router.Router, key int64, name string) error {
	return r.Do(ctx, "employees", fmt.Sprint(key), func(ctx context.Context, t router.Target) error {
		return setLastName(ctx, t.DB, t.Schema, key, name)
	})
}

func lastName(t *testing.T, db dbutil.Querier, schema string, key int64) string {
	t.Helper()
	var s string
	if err := db.QueryRowContext(ctx, "SELECT last_name FROM "+dbutil.Table(schema, "employees")+" WHERE emp_no = ?", key).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSwitchAcknowledgementLost: the cutover's switch commits but its
// acknowledgement is lost (SHARDCTL_FAULT=fail:cutover:ack, --retry-for 0):
// shardctl cannot tell it committed, so it keeps the fence and exits 3. The
// map says the target; the source stays fenced, so a router whose cached
// map predates the switch is turned away from the source and finds the
// target; 'plan abort' refuses (it would remove the served copy) and
// 'plan resume' applies the switch again (a no-op) and finishes.
func TestSwitchAcknowledgementLost(t *testing.T) {
	c := newCluster(t, "e2e_acklost", []int{2}, []int{300})
	lp := c.startLoad(100, c.keys("moving", 1, 300))
	key, stale := staleRouter(t, c, 5*time.Second)
	r := c.run([]string{"SHARDCTL_FAULT=fail:cutover:ack"}, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "2s", "--retry-for", "0")
	if r.code != 3 || !strings.Contains(r.stderr, "stays fenced") {
		t.Fatalf("the move whose switch was not acknowledged: exit %d, want 3 saying the shard stays fenced:\n%s", r.code, r.stderr)
	}
	c.wantShardAt(1, 3)
	if err := setLastName(ctx, c.db(2), c.shards[0].Schema, key, "direct"); err == nil {
		t.Error("a write to the source went through after a switch that was not acknowledged")
	}
	if err := setLastNameVia(stale, key, "stale"); err != nil {
		t.Fatalf("the stale router's write: %v", err)
	}
	if got := lastName(t, c.db(3), c.shards[0].Schema, key); got != "stale" {
		t.Errorf("the target has last_name %q for %d, want the stale router's write", got, key)
	}
	p, err := plans.Load(planFiles(t, c.planDir)[0])
	if err != nil {
		t.Fatal(err)
	}
	// An abort would lift the fence and remove the copy the map serves.
	if a := c.run(nil, "plan", "abort", p.ID); a.code == 0 || !strings.Contains(a.stderr, "plan resume") {
		t.Errorf("plan abort after a switch that committed unacknowledged: exit %d, want a refusal naming the resume:\n%s", a.code, a.stderr)
	}
	if got := lastName(t, c.db(3), c.shards[0].Schema, key); got != "stale" {
		t.Errorf("after the refused abort the target has last_name %q for %d", got, key)
	}
	c.mustRun("plan", "resume", p.ID)
	lp.stop(t)
	c.checkLedger(lp)
	c.wantShardAt(1, 3)
}
