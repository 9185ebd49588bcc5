package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// longLines are the lines of out longer than 200 characters.
func longLines(out string) []string {
	var long []string
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 200 {
			long = append(long, l)
		}
	}
	return long
}

// Rebalance that knows tenants (issue 49): a hot tenant isolated with
// 'move --keys --to' is on a shard marked dedicated, which 'rebalance
// --apply' neither fills with other tenants nor empties; a tenant an
// operator moved minutes before stays where it was put (--min-key-age);
// a LIST shard far over --max-shard-rows gets its whole chain of splits in
// one proposal; every line printed is at most 200 characters, keys as runs.
func TestRebalanceDedicatedAndCoolDown(t *testing.T) {
	testenv.FlavorNeutralInMySQLPass(t)
	// Shards 1 and 2 on server 1 (~2,700 rows each), shard 3 on server 2 (~540).
	c := newClusterSeed(t, "e2e_rebded", []int{1, 1, 2}, sandbox.SeedConfig{Sizes: []int{300, 300, 60}, List: true})
	s1, s3 := c.shards[0], c.shards[2]
	hot, placed := int64(5), s3.Lower+1
	addSalaries(t, c.db(1), s1.Schema, hot, 3000)
	addSalaries(t, c.db(2), s3.Schema, placed, 1500)

	// Isolate the hot tenant on server 3: its new shard is dedicated, and the output says so.
	r := c.mustRun("move", "--shard", fmt.Sprint(s1.ShardID), "--keys", fmt.Sprint(hot), "--to", c.env.Addr(3).String(), "--max-blackout", "5s", "--yes")
	if !strings.Contains(r.stdout+r.stderr, "marked dedicated") {
		t.Errorf("move --keys --to does not say its shard is dedicated:\n%s\n%s", r.stdout, r.stderr)
	}
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := m.Function("employees")
	res, err := m.Lookup(f, fmt.Sprint(hot))
	if err != nil {
		t.Fatal(err)
	}
	iso, isoSchema := res.Location.ShardID, res.Location.Schema
	if !m.Dedicated(iso) || iso <= 3 {
		t.Fatalf("tenant %d is on shard %d, dedicated %v: want a new dedicated shard", hot, iso, m.Dedicated(iso))
	}
	if r := c.mustRun("shardmap", "show"); !strings.Contains(r.stdout, "dedicated") {
		t.Errorf("shardmap show does not show the dedicated shard:\n%s", r.stdout)
	}
	// An operator places a big tenant on server 1 (it would be the first to go).
	c.mustRun("move", "--shard", fmt.Sprint(s3.ShardID), "--keys", fmt.Sprint(placed), "--into", fmt.Sprint(s1.ShardID), "--max-blackout", "5s", "--yes")

	// The dry run: a chain of splits for each shard over --max-shard-rows,
	// nothing into or out of the dedicated shard, the placed tenant left.
	policy := []string{"rebalance", "--max-shard-rows", "1000", "--max-server-share", "0.45"}
	r = c.mustRun(policy...)
	t.Logf("dry run:\n%s", r.stdout)
	if long := longLines(r.stdout); len(long) > 0 {
		t.Errorf("dry run lines over 200 characters: %q", long)
	}
	var dry struct {
		Proposed []struct {
			Operation string   `json:"operation"`
			Shard     int      `json:"shard_id"`
			Into      int      `json:"into"`
			Keys      []string `json:"keys"`
		} `json:"proposed"`
	}
	r = c.mustRun(append(policy, "-o", "json")...)
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	splits := map[int]int{}
	for _, o := range dry.Proposed {
		if o.Shard == iso || o.Into == iso {
			t.Errorf("a proposal touches dedicated shard %d: %+v", iso, o)
		}
		for _, k := range o.Keys {
			if k == fmt.Sprint(placed) {
				t.Errorf("a proposal moves tenant %d, placed by the operator minutes ago: %+v", placed, o)
			}
		}
		if o.Operation == "split" && len(o.Keys) > 0 {
			splits[o.Shard]++
		}
	}
	if splits[c.shards[1].ShardID] < 2 {
		t.Errorf("shard %d (~2,700 rows over --max-shard-rows 1000): %d splits proposed, want its chain (2 or more) in one proposal", c.shards[1].ShardID, splits[c.shards[1].ShardID])
	}

	// Applied for the server share: the dedicated shard keeps exactly its
	// tenant, the placed tenant stays, each move prints its blackout.
	r = c.mustRun("rebalance", "--max-server-share", "0.45", "--max-blackout", "5s", "--apply")
	t.Logf("apply:\n%s", r.stdout)
	if long := longLines(r.stdout); len(long) > 0 {
		t.Errorf("apply lines over 200 characters: %q", long)
	}
	if !strings.Contains(r.stdout, "finished") || !strings.Contains(r.stdout, "blackout") {
		t.Errorf("apply does not print each finished move with its blackout:\n%s", r.stdout)
	}
	if m, err = c.store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if mps := m.ShardMappings(iso); len(mps) != 1 || mps[0].Point.Int != hot || !m.Dedicated(iso) {
		t.Errorf("dedicated shard %d after rebalance --apply: %d mappings (%s), dedicated %v", iso, len(mps), shardmap.Summary(mps), m.Dedicated(iso))
	}
	if res, err := m.Lookup(f, fmt.Sprint(placed)); err != nil || res.Location.ShardID != s1.ShardID {
		t.Errorf("tenant %d, placed on shard %d minutes ago, is on %+v (%v)", placed, s1.ShardID, res.Location, err)
	}
	if hotRows := keyRows(t, c.db(3), isoSchema, hot); hotRows < 3000 {
		t.Errorf("tenant %d has %d rows on its shard", hot, hotRows)
	}
}
