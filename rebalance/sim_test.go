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

// simListFleet is a multi-tenant fleet: n LIST shards on servers servers,
// placed with the same skew as simFleet, each holding 1 to 40 tenants whose
// sizes are Zipf-like (most tenants small, a few holding tens of thousands
// of rows).
func simListFleet(seed int64, n, servers int) []Shard {
	r := rand.New(rand.NewSource(seed))
	z := rand.NewZipf(r, 1.3, 1, 2000)
	out := make([]Shard, n)
	key := 0
	for i := range out {
		srv := r.Intn(servers)
		if r.Intn(2) == 0 {
			srv = r.Intn(max(servers/10, 1))
		}
		s := Shard{ID: i + 1, Server: fmt.Sprintf("db%03d", srv), Func: 1, Kind: "LIST"}
		for t := 1 + r.Intn(40); t > 0; t-- {
			key++
			rows := 50 * int64(1+z.Uint64())
			s.Keys = append(s.Keys, Key{Key: fmt.Sprint(key), Rows: rows})
			s.Rows += rows
		}
		sort.Slice(s.Keys, func(a, b int) bool { return s.Keys[a].Rows > s.Keys[b].Rows })
		s.Bytes = s.Rows * 200
		out[i] = s
	}
	return out
}

// serverShareLowerBound is a lower bound of the moves any plan needs to bring
// every server under limit: each server over it must give away at least its
// excess, and no fewer units than its largest ones that add up to it. A unit
// is a shard, or a LIST shard's tenant (the policy moves keys of those).
func serverShareLowerBound(shards []Shard, limit int64) int {
	by := map[string][]int64{}
	load := map[string]int64{}
	for _, s := range shards {
		load[s.Server] += s.Rows
		if len(s.Keys) == 0 {
			by[s.Server] = append(by[s.Server], s.Rows)
		}
		for _, k := range s.Keys {
			by[s.Server] = append(by[s.Server], k.Rows)
		}
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
// The multi-tenant fleet counts moves in keys (tenants) moved: a LIST shard
// gives tenants, several into one shard being one operation.
func TestProposeOnLargeSimulatedFleets(t *testing.T) {
	for _, fl := range []struct {
		name  string
		fleet func(seed int64, n, servers int) []Shard
	}{{"range", simFleet}, {"multi-tenant", simListFleet}} {
		for seed := int64(1); seed <= 3; seed++ {
			fleet := fl.fleet(seed, 10000, 200)
			var total int64
			keys := 0
			for _, s := range fleet {
				total += s.Rows
				keys += len(s.Keys)
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
			moved := map[string]bool{}
			units := 0
			for _, o := range proposal {
				what := []string{fmt.Sprint("shard ", o.Shard)}
				if len(o.Keys) > 0 {
					what = o.Keys
				}
				if o.Kind != Move && o.Kind != MoveKeys && (o.Kind != Split || len(o.Keys) == 0) {
					t.Fatalf("%s seed %d: %s (not a move)", fl.name, seed, o)
				}
				for _, w := range what {
					if moved[w] {
						t.Fatalf("%s seed %d: %s moved twice (%s)", fl.name, seed, w, o)
					}
					moved[w] = true
					units++
				}
				load[o.From] -= o.Rows
				load[o.To] += o.Rows
			}
			over := 0
			for srv, l := range load {
				if l > limit {
					over++
					t.Errorf("%s seed %d: %s holds %d rows after the moves, over the share's %d", fl.name, seed, srv, l, limit)
				}
			}
			lb := serverShareLowerBound(fleet, limit)
			ratio := float64(units) / float64(max(lb, 1))
			t.Logf("%s seed %d: %d shards (%d tenants) on 200 servers, %d rows: %d units moved in %d operations (lower bound %d, ratio %.2f) proposed in %s; servers over the share after: %d",
				fl.name, seed, len(fleet), keys, total, units, len(proposal), lb, ratio, took.Round(time.Millisecond), over)
			if ratio > 1.5 {
				t.Errorf("%s seed %d: %d moves where %d can do: ratio %.2f", fl.name, seed, units, lb, ratio)
			}
		}
	}
}
