package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// The never-healing cells' budgets: a short retry budget, and the connection
// watchdog shortened (dbutil/watchdog.go; 30 s and 15 s by default) so a
// cell costs seconds.
const (
	foreverRetryFor      = 5 * time.Second
	foreverWatchdogAfter = 2 * time.Second
	foreverWatchdogProbe = time.Second
	// What a run may take past its retry budget before it stops: a few
	// watchdog bounds (the stuck statement, lifting the fence, saving the
	// plan) and the connect timeout of the last retry's checks (10 s).
	foreverSlack = 45 * time.Second
)

// TestFaultNeverHeals: a move under the ledger load runs into a black hole
// between shardctl and one server that does not heal while it runs (a dead
// path, a middlebox that swallows the connection, a frozen server): reads
// there wait for an answer that never comes, and no read timeout cuts them
// (a long statement must not be cut). The connection watchdog must end each
// such wait so the run stops with exit 3 within its retry budget and the
// watchdog's bound, its message naming the server; the shard left unfenced
// and online unless the message says so and names the command that ends it.
// Then the path heals, 'plan resume' finishes the move, and the ledger is
// clean. Cells: the copy with the target unreachable; the blackout with the
// fence up on a source that becomes unreachable; the cutover with the
// sharding database unreachable.
func TestFaultNeverHeals(t *testing.T) {
	alongside(t)
	st := testenv.NewSubtests(t)
	f := newFaultFleet(t)
	move := faultOps[0] // the cells move a whole shard, on the move's fleet
	f.seed(t, move)
	parent := t
	broken := false
	for _, tc := range []struct {
		cell, point, role string
	}{
		{"copy/target-blackhole", "during:copy", roleTarget},
		{"fence/source-blackhole", "fence:installed", roleSource},
		{"cutover/shardmap-blackhole", "after:fence", roleShardmap},
	} {
		ok := st.Run(tc.cell, func(t *testing.T) {
			if broken {
				f.seed(parent, move)
			}
			f.forever(t, tc.cell, tc.point, tc.role)
		})
		broken = !ok
	}
}

// forever runs one never-healing cell: shard 1 moved to the other server,
// the path to role's server black-holed once the move reaches point, and
// healed only after the move has exited.
func (f *faultFleet) forever(t *testing.T, cell, point, role string) {
	c := f.c
	c.t = t
	from, to := f.at, 5-f.at
	server := map[string]int{roleSource: from, roleTarget: to, roleShardmap: 1}[role]
	before := planFiles(t, c.planDir)
	moving := c.keys("moving", 1, 300)
	movingKey := groupLo(t, moving)
	lp := c.startLoad(100, moving)

	args := []string{"move", "--shard", "1", "--to", f.addr(to).String(), "--yes",
		"--max-blackout", faultMaxBlackout.String(), "--retry-for", foreverRetryFor.String(),
		"--watchdog-after", foreverWatchdogAfter.String(), "--watchdog-probe", foreverWatchdogProbe.String(),
		"--chunk-rows", "50", "--prune-chunk-rows", "50"}
	hold, done, out := startHeld(t, c, point, "", args)
	p := f.proxies[server]
	p.Blackhole(true)
	t.Cleanup(func() { p.Blackhole(false) })
	began := time.Now()
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	limit := foreverRetryFor + foreverSlack
	code := exitWithin(t, done, limit+time.Minute)
	took := time.Since(began)
	p.Blackhole(false)
	msg := lastLines(out.String(), 6)
	t.Logf("%s: the move exited %d after %s with the path still black-holed; its output ends:\n%s", cell, code, took.Round(100*time.Millisecond), msg)
	if code != 3 {
		t.Fatalf("%s: exit %d, want 3 (resume can succeed):\n%s", cell, code, out.String())
	}
	if took > limit {
		t.Errorf("%s: the move took %s to stop, over the retry budget and the watchdog's bounds (%s)", cell, took, limit)
	}
	if addr := f.addr(server).String(); !strings.Contains(out.String(), addr) {
		t.Errorf("%s: the move's output never names the unreachable server %s:\n%s", cell, addr, out.String())
	}
	if !strings.Contains(out.String(), "answered nothing") {
		t.Errorf("%s: the move's output never says the server stopped answering:\n%s", cell, out.String())
	}
	f.wantUnfenced(t, cell, movingKey, msg)
	// Its last word, not an earlier line, must say so: the failure that ends
	// the run may be a later retry's that knows nothing of the fence.
	if final := lastLines(out.String(), 1); len(fencedAt(t, f, movingKey)) > 0 && (!strings.Contains(final, "fenced") || !resumeCommand.MatchString(final)) {
		t.Errorf("%s: the shard is left fenced or offline and the error does not say so with the command that ends it:\n%s", cell, final)
	}

	path := newPlanFile(t, c.planDir, before)
	q, err := plans.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c.mustRun("plan", "resume", q.ID)
	lp.stop(t)
	c.checkLedger(lp)
	f.wantUnfenced(t, cell, movingKey, "")
	f.wantKeyAt(t, movingKey, to)
	if q, err = plans.Load(path); err != nil {
		t.Fatal(err)
	}
	if q.State != plans.StateDone {
		t.Fatalf("the plan is %s after the resume, want done", q.State)
	}
	f.at = to
}

// fencedAt is what is left fenced where the map serves key.
func fencedAt(t *testing.T, f *faultFleet, key int64) []string {
	t.Helper()
	server, _ := f.serving(t, key)
	return fenceLeft(t, f.c, server)
}
