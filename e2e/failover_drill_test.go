package e2e

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// TestFailoverDrill: a move, a split and a merge each lose their source
// primary (SIGKILL) at a point of the run, under the ledger load; its GTID
// replica (testenv.Replicated) is promoted as an operator would, the
// applications follow the shard map to it, and 'plan resume --source
// REPLICA' finishes the operation there. Every acknowledged write, before
// and after the failover, ends at its key's shard and nowhere else, and the
// plan's verify (checksums of the promoted replica against the target) ran
// after the promotion and passed.
//
// The primary rotates its binlog on its own schedule, so the plan's
// checkpoint names a file the replica's binlog need not have (or has with
// other contents): the resume must go by the checkpoint's GTID set. Here
// the primary has rotated three more times than its replica.
// TestFailoverResumesByGTID covers the kill after verify, in the tail.
func TestFailoverDrill(t *testing.T) {
	env := testenv.Get(t)
	for _, tc := range []struct {
		name, point string
		merge       bool
		args        func(c *cluster) []string
	}{
		{"move/copy", "during:copy", false, func(c *cluster) []string {
			return []string{"move", "--shard", "1", "--to", env.Addr(2).String()}
		}},
		{"move/catchup", "during:catchup", false, func(c *cluster) []string {
			return []string{"move", "--shard", "1", "--to", env.Addr(2).String()}
		}},
		{"split/catchup", "during:catchup", false, func(c *cluster) []string {
			return []string{"split", "--shard", "1", "--to", env.Addr(2).String()}
		}},
		{"merge/copy", "during:copy", true, func(c *cluster) []string {
			return []string{"merge", "--shard", "1", "--into", "2"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testenv.Replicated(t, 1)
			addrs, sizes := []dbutil.Addr{f.Primary()}, []int{200}
			if tc.merge {
				addrs, sizes = append(addrs, env.Addr(2)), append(sizes, 200)
			}
			c := newClusterAt(t, "e2e_drill", addrs, sizes, false)
			pdb, rdb := openAt(t, f.Primary()), openAt(t, f.Replica(1))
			setReadOnly(t, rdb, true) // a replica as operators keep one
			waitReplicated(t, pdb, rdb)
			// A primary that has been up longer than its replica has more
			// binlog files: its file names are past the replica's newest.
			for range 3 {
				if _, err := pdb.Exec("FLUSH LOCAL BINARY LOGS"); err != nil {
					t.Fatal(err)
				}
			}
			// Disjoint keys before and after the failover (each ledger is
			// checked on its own): 101-301 and 501-1501 above each lower bound.
			groups := func(name string, n int) []string {
				g := []string{c.keys(name+"1", 1, n)}
				if tc.merge {
					g = append(g, c.keys(name+"2", 2, n))
				}
				return g
			}

			lp := c.startLoad(100, groups("before", 200)...)
			args := append(tc.args(c), "--yes", "--chunk-rows", "50")
			path := heldAt(t, c, tc.point, args)
			// Stop the writes and let the replica receive them: an asynchronous
			// replica loses what the primary acknowledged and never sent, which
			// is no fault of the operation.
			lp.stop(t)
			waitReplicated(t, pdb, rdb)
			f.KillPrimary(t)
			p, err := plans.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			promote(t, rdb)
			promoted := time.Now()

			lp2 := c.startLoadBlocked(100, groups("after", 1000)...)
			r := c.run(nil, "plan", "resume", p.ID, "--source", f.Replica(1).String())
			lp2.stop(t)
			if r.code != 0 {
				t.Fatalf("resume on the promoted replica: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			c.checkLedger(lp)
			c.checkLedger(lp2)
			p, err = plans.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if p.State != plans.StateDone || p.Source.Addr() != f.Replica(1).String() {
				t.Fatalf("after the resume the plan is %s with source %s, want done on %s", p.State, p.Source.Addr(), f.Replica(1))
			}
			if v := p.Step(plans.StepVerify); v == nil || v.State != plans.Done || v.Ended.Before(promoted) {
				t.Fatalf("the plan's verify did not run on the promoted replica (promoted at %s): %+v", promoted, v)
			}
			if tc.point == "during:catchup" && !strings.Contains(r.stderr, "by GTID") {
				t.Errorf("the resume did not say it continued by GTID:\n%s", r.stderr)
			}
		})
	}
}

// heldAt starts args (an operation) with the fault point held
// (SHARDCTL_FAULT=hold:POINT), waits until it is held there, kills it, and
// returns its plan file. A primary that dies mid-run makes the operation
// retry and then stop; killing it held is the same, without the wait.
func heldAt(t *testing.T, c *cluster, point string, args []string) string {
	t.Helper()
	hold := filepath.Join(c.dir, "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	op := c.command([]string{"SHARDCTL_FAULT=hold:" + point, "SHARDCTL_FAULT_HOLD=" + hold}, args...)
	var out syncBuffer
	op.Stdout, op.Stderr = &out, &out
	if err := op.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- op.Wait() }()
	t.Cleanup(func() { _ = op.Process.Kill() })
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(hold + ".held"); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("%s ended (%v) before %s:\n%s", args[0], err, point, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach %s within 2 minutes:\n%s", args[0], point, out.String())
		}
	}
	_ = op.Process.Kill()
	<-done
	files := planFiles(t, c.planDir)
	if len(files) != 1 {
		t.Fatalf("want one plan file, have %v", files)
	}
	return files[0]
}

// setReadOnly sets the server's read_only, as an operator does on a
// replica and undoes when promoting it.
func setReadOnly(t *testing.T, db *sql.DB, on bool) {
	t.Helper()
	v := "OFF"
	if on {
		v = "ON"
	}
	if _, err := db.Exec("SET GLOBAL read_only = " + v); err != nil {
		t.Fatalf("read_only = %s: %v", v, err)
	}
}
