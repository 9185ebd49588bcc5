package rebalance

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"
)

// simFleet is a fleet of n RANGE shards on servers servers, skewed twice as
// real fleets are: shard sizes follow a power law (a few hot shards, a long
// tail of small ones), and the first tenth of the servers hold half the
// shards (the servers the fleet started on).
func simFleet(seed int64, n, servers int) []Shard {
	r := rand.New(rand.NewSource(seed))
	out := make([]Shard, n)
	for i := range out {
		srv := r.Intn(servers)
		if r.Intn(2) == 0 {
			srv = r.Intn(max(servers/10, 1))
		}
		// Pareto-like, 1k rows to 250k: a few hot shards, a long tail of small
		// ones; none larger than a server's share (splits take those first).
		rows := min(int64(1000*math.Pow(1/(1-r.Float64()*0.999), 1.2)), 250000)
		out[i] = Shard{ID: i + 1, Server: fmt.Sprintf("db%03d", srv), Func: 1, Kind: "RANGE", Order: i, Rows: rows, Bytes: rows * 200}
	}
	return out
}

// serverShareLowerBound is a lower bound of the moves any plan needs to bring
// every server under limit: each server over it must give away at least its
// excess, and no fewer shards than its largest ones that add up to it.
func serverShareLowerBound(shards []Shard, limit int64) int {
	by := map[string][]int64{}
	load := map[string]int64{}
	for _, s := range shards {
		by[s.Server] = append(by[s.Server], s.Rows)
		load[s.Server] += s.Rows
	}
	n := 0
	for srv, rows := range by {
		excess := load[srv] - limit
		sort.Slice(rows, func(i, j int) bool { return rows[i] > rows[j] })
		for i := 0; excess > 0 && i < len(rows); i++ {
			excess -= rows[i]
			n++
		}
	}
	return n
}

// The policy, as a pure function, on simulated fleets of 10,000 shards on
// 200 servers: the server share it proposes is reached (no server above its
// share once the moves are done), and with how many moves against a lower
// bound (reported; the test asserts no timing, and the ratio only loosely).
func TestProposeOnLargeSimulatedFleets(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		fleet := simFleet(seed, 10000, 200)
		var total int64
		for _, s := range fleet {
			total += s.Rows
		}
		p := Policy{MaxServerShare: 1.25 / 200}
		limit := int64(p.MaxServerShare * float64(total))
		start := time.Now()
		proposal := Propose(fleet, p)
		took := time.Since(start)
		load := map[string]int64{}
		for _, s := range fleet {
			load[s.Server] += s.Rows
		}
		moved := map[int]bool{}
		for _, o := range proposal {
			if o.Kind != Move || moved[o.Shard] {
				t.Fatalf("seed %d: %s (a shard moved twice, or not a move)", seed, o)
			}
			moved[o.Shard] = true
			load[o.From] -= o.Rows
			load[o.To] += o.Rows
		}
		over := 0
		for srv, l := range load {
			if l > limit {
				over++
				t.Errorf("seed %d: %s holds %d rows after the moves, over the share's %d", seed, srv, l, limit)
			}
		}
		lb := serverShareLowerBound(fleet, limit)
		ratio := float64(len(proposal)) / float64(max(lb, 1))
		t.Logf("seed %d: %d shards on 200 servers, %d rows: %d moves (lower bound %d, ratio %.2f) proposed in %s; servers over the share after: %d",
			seed, len(fleet), total, len(proposal), lb, ratio, took.Round(time.Millisecond), over)
		if ratio > 1.5 {
			t.Errorf("seed %d: %d moves where %d can do: ratio %.2f", seed, len(proposal), lb, ratio)
		}
	}
}
