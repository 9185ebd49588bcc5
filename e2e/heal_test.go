package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// retryHealsBeyondMoves: with the default --retry-for, a split and a
// merge held in their copy, a move held in its cleanup, and a move held
// inside its reverse window (reverted afterwards) each see a server crash
// and restart, resume themselves in place, and finish with exit 0, their log
// naming the retry (the window's reverse tail may reconnect by itself, with
// no retry of the run), the load's ledger clean.
func retryHealsBeyondMoves(t *testing.T, env *testenv.Env) {
	st := testenv.NewSubtests(t)
	for _, tc := range []struct {
		name, point string
		servers     []int // the shards' servers
		sizes       []int
		server      int // the server that restarts
		args        func(c *cluster) []string
		then        func(t *testing.T, c *cluster, p *plans.Plan) // after the exit
		at          int                                           // the shard serving the load's keys at the end, and its server
		atServer    int
		quiet       bool // may heal below the run: the reverse tail reconnects by itself, no retry needed
	}{
		// Held at salaries' first checkpoint, whose reader has some 50 chunks
		// left: held at the run's third checkpoint instead (during:copy),
		// the copy could have read every row before the restart, and with
		// no read on a dead session there was no retry to see (1 run in 3).
		{name: "split/copy/source", point: "copy:salaries", servers: []int{2}, sizes: []int{300}, server: 2,
			args: func(c *cluster) []string {
				return []string{"split", "--shard", "1", "--at", fmt.Sprint(c.shards[0].Lower + 150), "--to", c.env.Addr(3).String(), "--chunk-rows", "50"}
			}},
		{name: "merge/copy/source", point: "copy:salaries", servers: []int{3, 2}, sizes: []int{300, 300}, server: 2,
			args: func(c *cluster) []string {
				return []string{"merge", "--shard", "2", "--into", "1", "--chunk-rows", "50"}
			}},
		{name: "move/cleanup/source", point: "during:cleanup", servers: []int{2}, sizes: []int{300}, server: 2, at: 1, atServer: 3,
			args: func(c *cluster) []string {
				// the chunked deletes: a drop (the default for a whole shard)
				// is one statement on a fresh connection, no retry to see
				return []string{"move", "--shard", "1", "--to", c.env.Addr(3).String(), "--prune-chunk-rows", "50", "--cleanup", "delete"}
			}},
		{name: "move/window/target", point: "during:window", servers: []int{2}, sizes: []int{300}, server: 3, at: 1, atServer: 2, quiet: true,
			args: func(c *cluster) []string {
				return []string{"move", "--shard", "1", "--to", c.env.Addr(3).String(), "--reverse-window", "20s"}
			},
			then: func(t *testing.T, c *cluster, p *plans.Plan) {
				if p.State != plans.StateAborted {
					t.Errorf("the reverted move's plan is %s, want aborted (reverted in its window)", p.State)
				}
			}},
	} {
		st.Run(tc.name, func(t *testing.T) {
			c := newClusterOn(t, env, "e2e_healx", tc.servers, tc.sizes)
			groups := []string{c.keys("moving", len(tc.servers), tc.sizes[len(tc.sizes)-1])}
			lp := c.startLoad(100, groups...)
			args := append(tc.args(c), "--yes", "--max-blackout", "2s")
			code, out := runHeld(t, c, tc.point, args, func(_ *syncBuffer, release func()) {
				restart(t, c.env.Config, tc.server)
				release()
				if tc.point == "during:window" {
					// Back to the source inside the healed window.
					id := strings.TrimSuffix(strings.TrimPrefix(planFiles(t, c.planDir)[0], c.planDir+"/"), ".json")
					c.mustRun("plan", "revert", id, "--wait", "90s")
					// and the window ended at once rather than waited out
					// (a window that ends by itself: TestMoveReverseWindowEnds)
					c.mustRun("plan", "complete", id, "--wait", "90s")
				}
			})
			retries := 0
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "retrying in ") {
					retries++
					t.Log(l)
				}
			}
			t.Logf("exit %d after %d retries; the output ends:\n%s", code, retries, lastLines(out, 4))
			if code != 0 {
				t.Fatalf("%s exited %d after server %d restarted, want 0 (healed in place):\n%s", args[0], code, tc.server, out)
			}
			if retries == 0 && !tc.quiet {
				t.Errorf("%s finished without a retry in its log: the restart was not seen", args[0])
			}
			lp.stop(t)
			c.checkLedger(lp)
			p, err := plans.Load(planFiles(t, c.planDir)[0])
			if err != nil {
				t.Fatal(err)
			}
			if tc.then != nil {
				tc.then(t, c, p)
			} else if p.State != plans.StateDone {
				t.Errorf("the plan is %s, want done", p.State)
			}
			if tc.at > 0 {
				c.wantShardAt(tc.at, tc.atServer)
			}
		})
	}
}
