package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
)

// A fleet rebalanced at once under the ledger load: 120 range shards
// round-robin on three servers; two too big (splits), two pairs of empty
// neighbours (merges), and server 1 over its share by one and a half of its
// two medium shards (moves). 'rebalance --apply --concurrency 4
// --same-server' runs the six operations, four at a time, while the load
// writes to a split, a moved, a merged and an untouched shard: every
// operation finishes, the untouched shard sees no error, the ledger is
// clean, and a second dry run finds nothing to do. (scripts/bench.sh's
// fleet row runs the same at 1,000 shards.)
func TestRebalanceAFleetUnderLoad(t *testing.T) {
	testenv.FlavorNeutral(t)
	const n = 120
	servers, sizes := make([]int, n), make([]int, n)
	for i := range sizes {
		servers[i], sizes[i] = i%3+1, 10
	}
	big, med := []int{1, 4}, []int{7, 10} // shard numbers, all on server 1
	for _, k := range big {
		sizes[k-1] = 300
	}
	for _, k := range med {
		sizes[k-1] = 60
	}
	for _, k := range []int{40, 41, 80, 81} {
		sizes[k-1] = 0
	}
	c := newCluster(t, "e2e_fleet", servers, sizes)

	var total, l1, bigRows, medRows int64
	for i, s := range c.shards {
		total += s.Rows
		if servers[i] == 1 {
			l1 += s.Rows
		}
	}
	for _, k := range big {
		bigRows += c.shards[k-1].Rows
	}
	for _, k := range med {
		medRows += c.shards[k-1].Rows
	}
	// Server 1 after the splits give half of the big shards away, less one
	// and a half medium shards: both move.
	share := float64(l1-bigRows/2-3*medRows/4) / float64(total)
	policy := []string{"rebalance", "--max-shard-rows", "2000", "--min-shard-rows", "30", "--max-server-share", fmt.Sprintf("%.4f", share),
		"--exact", "--max-blackout", "5s", "-o", "json"}
	t.Logf("%d shards, %d rows, server 1 %d; policy %v", n, total, l1, policy[1:])

	kinds := func(r rebalanceOut) string {
		var s []string
		for _, p := range r.Proposed {
			s = append(s, p.Operation)
		}
		sort.Strings(s)
		return strings.Join(s, ",")
	}
	var dry rebalanceOut
	r := c.mustRun(policy...)
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil {
		t.Fatalf("dry run output: %v\n%s", err, r.stdout)
	}
	if got := kinds(dry); got != "merge,merge,move,move,split,split" {
		t.Fatalf("dry run proposed %s, want 2 splits, 2 merges and 2 moves\n%s", got, r.stdout)
	}
	for _, p := range dry.Planned {
		if p.Error != "" {
			t.Fatalf("dry run cannot plan: %+v", p)
		}
	}

	lower := func(k int) int64 { return c.shards[k-1].Lower }
	split, moved, merged, untouched := big[0], med[0], 41, 13
	lp := c.startLoad(200,
		fmt.Sprintf("split=%d-%d", lower(split)+250, lower(split)+290), // the upper half moves to the new shard
		fmt.Sprintf("move=%d-%d", lower(moved)+1, lower(moved)+41),
		fmt.Sprintf("merge=%d-%d", lower(merged)+1, lower(merged)+9), // at most 8 rows: still under --min-shard-rows with its neighbour
		fmt.Sprintf("other=%d-%d", lower(untouched)+1, lower(untouched)+21))

	start := time.Now()
	var apply rebalanceOut
	r = c.mustRun(append(policy, "--apply", "--concurrency", "4", "--same-server")...)
	t.Logf("rebalance --apply --concurrency 4 --same-server: %s", time.Since(start).Round(time.Millisecond))
	if err := json.Unmarshal([]byte(r.stdout), &apply); err != nil {
		t.Fatalf("apply output: %v\n%s", err, r.stdout)
	}
	st := lp.stop(t)
	t.Logf("load: %d acked; %+v", st.Acked, st.Groups)
	done := map[string]int{}
	for _, f := range apply.Finished {
		done[f.Operation]++
	}
	if len(apply.Left) != 0 || done["split"] != 2 || done["merge"] != 2 || done["move"] != 2 {
		t.Fatalf("finished %v, left %+v, want 2 splits, 2 merges and 2 moves\n%s", done, apply.Left, r.stdout)
	}
	if g := st.Groups["other"]; g.Errors != 0 || g.Acked == 0 {
		t.Errorf("the untouched shard: %+v", g)
	}
	c.checkLedger(lp)

	var again struct {
		rebalanceOut
		Unmet []json.RawMessage `json:"unmet"`
	}
	r = c.mustRun(policy...)
	if err := json.Unmarshal([]byte(r.stdout), &again); err != nil || len(again.Proposed) != 0 || len(again.Unmet) != 0 {
		t.Fatalf("a second dry run: %v\n%s", err, r.stdout)
	}
}
