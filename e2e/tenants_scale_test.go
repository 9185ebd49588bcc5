package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/doctor"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// runIn runs shardctl with stdin as its standard input.
func (c *cluster) runIn(stdin string, args ...string) result {
	c.t.Helper()
	cmd := c.command(nil, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	if r.code < 0 {
		c.t.Fatal(err)
	}
	return r
}

// A SaaS fleet's scale: 100,000 LIST points registered with 'shardmap
// import' (rows only for the seeded tenants and the ones the load writes;
// the point count is what a blackout or a plan would grow with), then, on
// the one cluster, under the ledger load and each killed (kill -9) and
// resumed: three tenants moved out of the big shard into an existing one,
// a hot tenant isolated on a shard of its own, a merge of the two big LIST
// shards, and a rebalance that brings the big server under its share and
// leaves the isolated tenant's shard alone. The ledger is clean and no row
// changes after each. Import's own promises are checked on the way: stdin,
// --dry-run, a refusal that names the line and writes nothing, a re-point
// of a tenant with rows refused with the key move, export round trips.
func TestTenantsAtScale(t *testing.T) {
	const seeded = 300
	// The fleet is 100,000 points (SHARDCTL_SCALE_POINTS=100000,
	// about 7 minutes a flavor on 2 loaded cores); the suite registers
	// 10,000, enough that anything costing per point inside a blackout or a
	// plan shows, within CI's time.
	points := 10_000
	if v, err := strconv.Atoi(os.Getenv("SHARDCTL_SCALE_POINTS")); err == nil && v >= 1000 {
		points = v
	}
	// Shards 1 and 2 (the big ones) share server 1; shard 3 is on server 2.
	c := newClusterSeed(t, "e2e_scale", []int{1, 1, 2}, sandbox.SeedConfig{Sizes: []int{seeded, seeded, 60}, List: true})
	s1, s2, s3 := c.shards[0], c.shards[1], c.shards[2]

	// 1. Register the fleet: 50,000 tenants for each big shard.
	var csv strings.Builder
	csv.WriteString("key,shard\n")
	for i := 0; i < points; i++ {
		sh := s1.ShardID
		if i >= points/2 {
			sh = s2.ShardID
		}
		fmt.Fprintf(&csv, "%d,%d\n", 5_000_001+i, sh)
	}
	v0, _ := c.store.Version(ctx)
	dup := csv.String() + "5000017,1\n"
	if r := c.runIn(dup, "shardmap", "import", "-"); r.code != 2 || !strings.Contains(r.stderr, fmt.Sprintf("line %d: key 5000017 is on line 18 already", points+2)) {
		t.Fatalf("a duplicate: exit %d\n%s", r.code, r.stderr)
	}
	if r := c.runIn(csv.String(), "shardmap", "import", "--dry-run", "-"); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("%d added, 0 re-pointed, 0 unchanged", points)) {
		t.Fatalf("dry run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if v, _ := c.store.Version(ctx); v != v0 {
		t.Fatalf("a refusal and a dry run moved the version %d -> %d", v0, v)
	}
	r := c.runIn(csv.String(), "shardmap", "import", "-", "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("imported into function employees: %d added", points)) {
		t.Fatalf("import: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("import: %s", strings.TrimSpace(r.stdout))
	if v, _ := c.store.Version(ctx); v != v0+1 {
		t.Fatalf("the import bumped the version %d times, want once", v-v0)
	}
	show := c.mustRun("shardmap", "show")
	for _, l := range strings.Split(show.stdout, "\n") {
		if len(l) > 200 {
			t.Errorf("shardmap show prints a line of %d characters: %.120s…", len(l), l)
		}
	}
	if want := fmt.Sprintf("(%d keys)", points/2+2*seeded); !strings.Contains(show.stdout, want) {
		t.Errorf("shardmap show does not summarize shard 1's points as %s:\n%s", want, show.stdout)
	}
	t.Logf("shardmap show:\n%s", show.stdout)

	hot := int64(350)
	moving := []string{"moving=301-304", "hot=350-351", "staying=400-601", fmt.Sprintf("into=%d-%d", s3.Lower+61, s3.Lower+121)}
	args := []string{"--yes", "--chunk-rows", "200", "--prune-chunk-rows", "500", "--max-blackout", "10s"}
	step := func(name string, groups []string, faults []string, op ...string) {
		t.Helper()
		before := c.fleetSums(groups)
		lp := c.startLoad(60, groups...)
		c.killAtEachThenResume(faults, append(op, args...))
		c.nothingLost(lp, groups, before, name)
	}
	wantAt := func(m *shardmap.Map, key int64, shard int) {
		t.Helper()
		f, _ := m.Function("employees")
		if res, err := m.Lookup(f, fmt.Sprint(key)); err != nil || res.Mapping.ShardID != shard || res.Mapping.Status != shardmap.Online {
			t.Fatalf("tenant %d: %+v %v, want shard %d online", key, res.Mapping, err, shard)
		}
	}

	// 2. Three tenants out of the big shard into the existing shard 3
	// (tenant 301 with rows of its own, whatever the load writes).
	addSalaries(t, c.db(1), s1.Schema, 301, 20)
	step("three tenants into shard 3", moving, []string{"during:fence:half"}, "move", "--shard", "1", "--keys", "301,302,303", "--into", "3")
	m := c.load()
	for _, k := range []int64{301, 302, 303} {
		wantAt(m, k, s3.ShardID)
	}
	wantAt(m, 304, s1.ShardID)
	// Tenant 301 has rows on shard 3 now: import cannot hand it back.
	if r := c.runIn("301,1\n", "shardmap", "import", "-"); r.code != 2 || !strings.Contains(r.stderr, "line 1: key 301") || !strings.Contains(r.stderr, "shardctl move --shard 3 --keys 301 --into 1") {
		t.Fatalf("re-pointing a tenant with rows: exit %d\n%s", r.code, r.stderr)
	}

	// 3. The hot tenant isolated on a new shard on server 3.
	step("the hot tenant isolated", moving, []string{"during:copy"}, "move", "--shard", "1", "--keys", fmt.Sprint(hot), "--to", c.env.Addr(3).String())
	m = c.load()
	f, _ := m.Function("employees")
	res, err := m.Lookup(f, fmt.Sprint(hot))
	if err != nil || res.Location.Addr() != c.env.Addr(3) || res.Mapping.ShardID <= s3.ShardID {
		t.Fatalf("tenant %d: %+v %v, want a new shard on server 3", hot, res, err)
	}
	hotShard := res.Mapping.ShardID
	// The isolated shard is dedicated (move --keys --to marks it so); saying
	// it again changes nothing.
	c.mustRun("shardmap", "set-policy", "--shard", fmt.Sprint(hotShard), "--dedicated")

	// 4. The two big LIST shards (50,300 points each) merge.
	step("the big shards merged", []string{c.keys("merging", 2, seeded), "staying=400-601"}, []string{"during:fence:half"}, "merge", "--shard", "2", "--into", "1")
	m = c.load()
	wantAt(m, int64(5_000_001+points-1), s1.ShardID)
	wantAt(m, s2.Lower+1, s1.ShardID)
	if _, err := m.Location(s2.ShardID); err == nil {
		t.Fatalf("shard %d is still in the map after its merge", s2.ShardID)
	}

	// 5. Server 1 holds most of the rows: a rebalance under its share,
	// killed in its first operation's copy, resumed, then run again; the
	// dedicated shard on the lightest server receives nothing.
	groups := []string{"staying=400-601", fmt.Sprintf("into=%d-%d", s3.Lower+61, s3.Lower+121)}
	before := c.fleetSums(groups)
	lp := c.startLoad(60, groups...)
	policy := []string{"rebalance", "--max-server-share", "0.6", "--chunk-rows", "200", "--max-blackout", "10s", "--apply"}
	old := planFiles(t, c.planDir)
	id := c.killedRun("during:copy", policy, old)
	p, err := plans.Load(plans.Path(c.planDir, id))
	if err != nil {
		t.Fatal(err)
	}
	c.locksFreed(p.Locks)
	c.resumeUntil(id, "the rebalance's killed operation", "")
	// The killed rebalance's lock row names a dead process, and the lock is
	// free: a note for doctor, not a failure.
	rep := c.doctor(0)
	if f := rep.find(t, doctor.KindLockRow, "", 0); !f.Info || rep.Found != 0 {
		t.Fatalf("doctor after a killed rebalance: %+v", rep)
	}
	for try := 0; ; try++ {
		var out rebalanceOut
		r := c.mustRun(append(policy, "-o", "json")...)
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("rebalance: %v\n%s", err, r.stdout)
		}
		if len(out.Proposed) == 0 {
			break
		}
		if try == 3 {
			t.Fatalf("rebalance still proposes after 4 runs:\n%s", r.stdout)
		}
	}
	c.nothingLost(lp, groups, before, "after the rebalance")
	m = c.load()
	if ms := m.ShardMappings(hotShard); len(ms) != 1 || ms[0].Point.Int != hot {
		t.Errorf("the dedicated shard %d holds %s, want tenant %d alone", hotShard, shardmap.Summary(ms), hot)
	}
	rows := c.ownership()
	var total, server1 int64
	for id, n := range rows {
		total += n
		if l, _ := m.Location(id); l.Addr() == c.env.Addr(1) {
			server1 += n
		}
	}
	if share := float64(server1) / float64(total); share > 0.62 { // the load's writes since the run: a little drift
		t.Errorf("server 1 holds %.2f of the rows after the rebalance, want under 0.6", share)
	}

	// 6. Export round trips, in both forms: importing it changes nothing.
	dir := t.TempDir()
	for _, form := range [][]string{{filepath.Join(dir, "points.csv")}, {filepath.Join(dir, "points.json"), "-o", "json"}} {
		c.mustRun(append([]string{"shardmap", "export", form[0]}, form[1:]...)...)
		v, _ := c.store.Version(ctx)
		r := c.mustRun("shardmap", "import", form[0])
		if !strings.Contains(r.stdout, "0 added, 0 re-pointed") {
			t.Errorf("import of its own export (%s): %s", filepath.Base(form[0]), r.stdout)
		}
		if v2, _ := c.store.Version(ctx); v2 != v {
			t.Errorf("import of its own export moved the version %d -> %d", v, v2)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "points.csv"))
	if n := bytes.Count(b, []byte("\n")); n != points+4*seeded+120+1 {
		t.Errorf("the export holds %d lines, want every point and a header", n)
	}
}

// load reads the shard map.
func (c *cluster) load() *shardmap.Map {
	c.t.Helper()
	m, err := c.store.Load(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}
