package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// Key moves: some keys of a shard move with their rows, into an existing
// shard on another server or onto a new shard of their own, under the
// ledger load, killed at a step and resumed. Every group of the load
// (the moving keys, the keys that stay on the source, the destination's
// own keys) sees no error, the ledger and the fleet's rows are clean, and
// every row is at its key's shard.
func TestKeyMoves(t *testing.T) {
	const seeded = 400
	type keyCase struct {
		name    string
		list    bool
		servers []int
		args    func(c *cluster) []string
		groups  func(c *cluster) []string
		faults  []string
		mapped  func(c *cluster, m *shardmap.Map) // the map after the move
		setup   func(c *cluster)                  // before the load starts
		after   func(c *cluster, p *plans.Plan)   // the finished plan
	}
	lookup := func(c *cluster, m *shardmap.Map, key int64) shardmap.Resolution {
		c.t.Helper()
		f, err := m.Function("employees")
		if err != nil {
			c.t.Fatal(err)
		}
		res, err := m.Lookup(f, fmt.Sprint(key))
		if err != nil {
			c.t.Fatalf("lookup %d: %v", key, err)
		}
		return res
	}
	wantShard := func(c *cluster, m *shardmap.Map, key int64, want int) {
		c.t.Helper()
		if res := lookup(c, m, key); res.Mapping.ShardID != want || res.Mapping.Status != shardmap.Online {
			c.t.Errorf("key %d maps to shard %d (%s), want shard %d online", key, res.Mapping.ShardID, res.Mapping.Status, want)
		}
	}
	cases := []keyCase{
		{name: "list-into", list: true, servers: []int{1, 2, 3},
			args: func(c *cluster) []string {
				return []string{"move", "--shard", "1", "--keys", "301,302,303", "--into", "2"}
			},
			groups: func(c *cluster) []string {
				return []string{"moving=301-304", "staying=304-700", fmt.Sprintf("into=%d-%d", c.shards[1].Lower+201, c.shards[1].Lower+700)}
			},
			faults: []string{"during:copy", "during:fence:half"},
			// A shard of many tenants (most without rows yet): nothing
			// inside the blackout costs in proportion to them.
			setup: func(c *cluster) { c.addTenants(1, 10_001, manyTenants) },
			mapped: func(c *cluster, m *shardmap.Map) {
				for _, k := range []int64{301, 302, 303} {
					wantShard(c, m, k, 2)
				}
				wantShard(c, m, 300, 1)
				wantShard(c, m, 304, 1)
				wantShard(c, m, 10_001+manyTenants-1, 1)
			},
			after: func(c *cluster, p *plans.Plan) {
				// The plan records the shard's tenants as a count and a
				// digest, so each save inside the blackout stays small.
				b, err := plans.Marshal(p)
				if err != nil {
					c.t.Fatal(err)
				}
				owned := 0
				for _, o := range p.Against.Owned {
					owned += o.Points + len(o.Keys.Points)
				}
				if owned < manyTenants || len(b) > 100_000 {
					c.t.Errorf("the plan records %d owned tenants in %d bytes; want the %d and more in under 100 KB", owned, len(b), manyTenants)
				}
				c.t.Logf("3 tenants out of a shard of %d: plan %d bytes, blackout %.1f ms over %d attempt(s)", manyTenants+2*seeded, len(b), p.Result.BlackoutMS, len(p.Attempts))
			}},
		{name: "list-isolate", list: true, servers: []int{1, 2, 3},
			args: func(c *cluster) []string {
				return []string{"move", "--shard", "1", "--keys", "350", "--to", c.env.Addr(3).String()}
			},
			groups: func(c *cluster) []string {
				return []string{"moving=350-351", "staying=200-350", "after=351-700"}
			},
			faults: []string{"during:catchup", "after:cutover"},
			mapped: func(c *cluster, m *shardmap.Map) {
				res := lookup(c, m, 350)
				if res.Mapping.ShardID <= 3 || res.Location.Addr() != c.env.Addr(3) || res.Mapping.Status != shardmap.Online {
					c.t.Errorf("tenant 350 maps to shard %d at %v (%s), want a new shard on server 3", res.Mapping.ShardID, res.Location, res.Mapping.Status)
				}
				wantShard(c, m, 349, 1)
				wantShard(c, m, 351, 1)
			}},
		{name: "range-into", servers: []int{1, 2, 3},
			args: func(c *cluster) []string {
				return []string{"move", "--shard", "1", "--range", "250:320", "--into", "3"}
			},
			groups: func(c *cluster) []string {
				return []string{"moving=250-320", "below=150-250", "above=320-600", fmt.Sprintf("into=%d-%d", c.shards[2].Lower+201, c.shards[2].Lower+600)}
			},
			faults: []string{"during:fence:offline", "during:cleanup"},
			mapped: func(c *cluster, m *shardmap.Map) {
				wantShard(c, m, 249, 1)
				wantShard(c, m, 250, 3)
				wantShard(c, m, 319, 3)
				wantShard(c, m, 320, 1)
				// shard 2 (its range between them) is untouched: shard 3's
				// new range is a mapping of its own
				wantShard(c, m, c.shards[1].Lower+1, 2)
			}},
		// LIST maps everywhere the other maps are: a split by a key set and
		// a merge of two LIST shards.
		{name: "list-split", list: true, servers: []int{1, 2, 3},
			args: func(c *cluster) []string {
				return []string{"split", "--shard", "1", "--keys", "120,121", "--to", c.env.Addr(3).String()}
			},
			groups: func(c *cluster) []string { return []string{"moving=120-122", "staying=122-500"} },
			faults: []string{"after:copy"},
			mapped: func(c *cluster, m *shardmap.Map) {
				if res := lookup(c, m, 121); res.Location.Addr() != c.env.Addr(3) || res.Mapping.ShardID <= 3 {
					c.t.Errorf("tenant 121 maps to shard %d at %v, want a new shard on server 3", res.Mapping.ShardID, res.Location)
				}
				wantShard(c, m, 122, 1)
			}},
		{name: "list-merge", list: true, servers: []int{1, 2, 3},
			args:   func(c *cluster) []string { return []string{"merge", "--shard", "2", "--into", "1"} },
			groups: func(c *cluster) []string { return []string{c.keys("moving", 2, seeded), c.keys("staying", 1, seeded)} },
			faults: []string{"during:fence:half"},
			mapped: func(c *cluster, m *shardmap.Map) {
				wantShard(c, m, c.shards[1].Lower+1, 1)
				wantShard(c, m, c.shards[1].Lower+2*seeded, 1)
				if _, err := m.Location(2); err == nil {
					c.t.Errorf("shard 2's location is still in the map")
				}
			}},
	}
	// The cases run in parallel: each has its own shard map, schemas and
	// load. A case's faults are one chain (killAtEachThenResume): the run
	// killed at the first, its resume at the next.
	st := testenv.NewSubtests(t)
	for ci, kc := range cases {
		st.RunParallel(kc.name, func(t *testing.T) {
			c := newClusterSeed(t, fmt.Sprintf("e2e_keys%d", ci), kc.servers, sandbox.SeedConfig{Sizes: []int{seeded, seeded, seeded}, List: kc.list})
			if kc.setup != nil {
				kc.setup(c)
			}
			groups := kc.groups(c)
			before := c.fleetSums(groups)
			lp := c.startLoad(200, groups...)
			c.killAtEachThenResume(kc.faults, append(kc.args(c), "--yes", "--chunk-rows", "100", "--prune-chunk-rows", "100"))
			c.nothingLost(lp, groups, before, "after the kills at "+strings.Join(kc.faults, ", "))
			m, err := c.store.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			kc.mapped(c, m)
			if kc.after != nil {
				p := c.currentPlan()
				if p == nil || p.Against == nil {
					t.Fatalf("no finished plan with what it was made against in %s", c.planDir)
				}
				kc.after(c, p)
			}
		})
	}
}

// manyTenants is how many tenants without rows TestKeyMoves registers
// beside the seeded ones in the shard its tenants leave.
const manyTenants = 20_000

// addTenants maps n LIST keys from first on to shard id (tenants without
// rows yet), through the shard map's own add path, in one transaction.
func (c *cluster) addTenants(id int, first, n int64) {
	c.t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(first + int64(i))
	}
	if err := c.store.AddPoints(ctx, "employees", keys, id); err != nil {
		c.t.Fatalf("register %d tenants on shard %d: %v", n, id, err)
	}
}

// A key move's dry run lists the keys with their rows and the shard-map
// statements, and changes nothing; keys that are not the shard's are
// refused with what to give.
func TestKeyMoveDryRunAndRefusals(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newClusterSeed(t, "e2e_keys_dry", []int{1, 2, 3}, sandbox.SeedConfig{Sizes: []int{200, 200, 200}, List: true})
	v0, _ := c.store.Version(ctx)
	r := c.mustRun("move", "--shard", "1", "--keys", "101,102", "--into", "2", "--dry-run")
	for _, want := range []string{"keys 101-102 (2 keys)", "UPDATE", "list_points", "dry run: nothing was changed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dry run lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--keys", fmt.Sprint(c.shards[1].Lower + 5), "--into", "3"}, "belongs to shard 2"},
		{[]string{"--keys", "99999", "--into", "3"}, "not in employees's list"},
		{[]string{"--range", "1:50", "--into", "3"}, "LIST function"},
		{[]string{"--keys", "101", "--into", "1"}, "already"},
		{[]string{"--keys", "101"}, "--into"},
		{[]string{"--keys", "x", "--into", "2"}, "not a signed 64-bit integer"},
	} {
		res := c.run(nil, append([]string{"move", "--shard", "1", "--yes"}, bad.args...)...)
		if res.code != 2 || !strings.Contains(res.stderr, bad.want) {
			t.Errorf("move %v: exit %d, want 2 with %q\n%s", bad.args, res.code, bad.want, res.stderr)
		}
	}
	if v, _ := c.store.Version(ctx); v != v0 {
		t.Errorf("the shard map changed: version %d -> %d", v0, v)
	}
	if files := planFiles(t, c.planDir); len(files) != 0 {
		t.Errorf("plan files left: %v", files)
	}
}

// A key move's reverse window: the tenants go to shard 2, come back to
// shard 1 with 'plan revert', go again, and 'plan complete' ends it. Each
// phase's load writes the moving tenants and both shards' own; the keys
// that do not move stay writable on both sides throughout.
func TestKeyMoveRevertWindow(t *testing.T) {
	c := newClusterSeed(t, "e2e_keys_win", []int{1, 2, 3}, sandbox.SeedConfig{Sizes: []int{300, 300, 300}, List: true})
	other := c.shards[1].Lower
	phase := func(k int64) *loadProc {
		// Each phase writes tenants of its own, so an earlier phase's ledger
		// still holds when it is checked again.
		return c.startLoad(60, fmt.Sprintf("moving=%d-%d", 301+2*k, 303+2*k), fmt.Sprintf("staying=%d-%d", 100+k*50, 150+k*50), fmt.Sprintf("other=%d-%d", other+100+k*50, other+150+k*50))
	}
	wantAt := func(key int64, shard int) {
		t.Helper()
		m, err := c.store.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := m.Function("employees")
		res, err := m.Lookup(f, fmt.Sprint(key))
		if err != nil || res.Mapping.ShardID != shard || res.Mapping.Status != "online" {
			t.Fatalf("tenant %d: %+v %v, want shard %d online", key, res.Mapping, err, shard)
		}
	}
	lp1 := phase(0)
	mv := c.startBG(nil, "move", "--shard", "1", "--keys", "301,302,303,304,305,306", "--into", "2", "--yes", "--reverse-window", "3m", "--max-blackout", "5s", "--chunk-rows", "100")
	p := c.waitWin("the window", 90*time.Second, mv, inWindow(plans.SideTarget, time.Now()))
	id := p.ID
	c.stopCheck(lp1)
	wantAt(301, 2)
	wantAt(300, 1)

	lp2 := phase(1)
	lp2.waitWriting(t, phaseWrites)
	c.mustRun("plan", "revert", id, "--wait", "90s")
	c.waitWin("the tail to the target", 60*time.Second, mv, inWindow(plans.SideSource, time.Now()))
	c.stopCheck(lp2, lp1)
	wantAt(304, 1)

	c.revertForwardComplete(id, "the key move", mv, phase(2), lp1, lp2)
	wantAt(301, 2)
	wantAt(306, 2)
	wantAt(307, 1)
	c.ownership()
}
