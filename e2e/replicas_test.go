package e2e

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// TestMoveWaitsForItsReplica: a move watching the source's replica with
// --max-lag, under the ledger load. The replica's SQL thread is stopped, then
// its process is killed: the move pauses each time and says why (the plan's
// running step, which 'plan watch' prints, and a log line), never stops, and
// finishes once the replica is back, with every acknowledged write in place.
// MySQL 8.4+ has no SHOW SLAVE STATUS: the move must read the replica all the same.
func TestMoveWaitsForItsReplica(t *testing.T) {
	env := testenv.Get(t)
	f := testenv.Replicated(t, 1)
	c := newClusterAt(t, "e2e_replag", []dbutil.Addr{f.Primary()}, []int{300}, false)
	pdb, rdb := openAt(t, f.Primary()), openAt(t, f.Replica(1))
	waitReplicated(t, pdb, rdb)
	replicaTargetRefusals(t, c, f) // issue 53, on this fleet rather than one of its own
	testenv.SQLThread(t, rdb, false)

	for _, r := range []string{f.Replica(1).String(), "auto"} { // named, and discovered
		dry := c.mustRun("move", "--shard", "1", "--to", env.Addr(2).String(), "--dry-run", "--max-lag", "1s", "--replica", r)
		if want := "replica watched (--max-lag 1s): " + f.Replica(1).String() + ", a replica of the source"; !strings.Contains(dry.stdout, want) {
			t.Fatalf("--dry-run --replica %s does not say %q:\n%s", r, want, dry.stdout)
		}
	}

	lp := c.startLoad(100, c.keys("before", 1, 300))
	move := c.command(nil, "move", "--shard", "1", "--to", env.Addr(2).String(), "--yes",
		"--max-lag", "1s", "--replica", f.Replica(1).String())
	var mout, merr bytes.Buffer
	move.Stdout, move.Stderr = &mout, &merr
	if err := move.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = move.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- move.Wait() }()

	id := waitThrottled(t, c, exited, &merr, "is not replicating")
	watch := c.command(nil, "plan", "watch", id)
	var wout syncBuffer
	watch.Stdout, watch.Stderr = &wout, &wout
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Process.Kill() })

	f.Kill(t, 1)
	waitThrottled(t, c, exited, &merr, "cannot read the lag of replica "+f.Replica(1).String())
	// plan watch (off a terminal: a line per change) shows the pause.
	for deadline := time.Now().Add(time.Minute); !strings.Contains(wout.String(), "copy waits: paused: cannot read the lag"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("plan watch did not show the pause:\n%s", wout.String())
		}
	}
	f.Restart(t) // the replica comes back replicating, SQL thread included

	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("move: %v\n%s\n%s", err, mout.String(), merr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the move did not finish within 3 minutes of the replica's return\n%s", merr.String())
	}
	lp.stop(t)
	c.checkLedger(lp)
	if err := watch.Wait(); err != nil {
		t.Errorf("plan watch: %v\n%s", err, wout.String())
	}
	for _, want := range []string{"is not replicating", "cannot read the lag of replica"} {
		if !strings.Contains(merr.String(), "work waits") || !strings.Contains(merr.String(), want) {
			t.Errorf("the move's log does not say it waits because the replica %s:\n%s", want, merr.String())
		}
	}
	c.wantShardAt(1, 2)
}

// waitThrottled waits until the only plan's running step says it waits for
// want, and returns the plan's ID; it fails at once if the move exits.
func waitThrottled(t *testing.T, c *cluster, exited chan error, stderr *bytes.Buffer, want string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("the move ended (%v) while its replica was away; it should have paused:\n%s", err, stderr.String())
		default:
		}
		if files := planFiles(t, c.planDir); len(files) == 1 {
			if p, err := plans.Load(files[0]); err == nil {
				for _, s := range p.Steps {
					if s.State == plans.Running && strings.Contains(s.Throttled, want) {
						return p.ID
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the plan never said it waits because %q\n%s", want, stderr.String())
	return ""
}

// syncBuffer is a bytes.Buffer a child process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
