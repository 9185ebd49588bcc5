package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// ownership checks that every shard holds exactly the rows the shard map says
// it owns: no sharded row anywhere outside its shard's mappings.
func (c *cluster) ownership() map[int]int64 {
	c.t.Helper()
	m, err := c.store.Load(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	counts := map[int]int64{}
	for _, l := range m.Locations {
		db := c.env.DB(c.t, c.serverIndex(l.Addr().String()), "")
		for _, tb := range sandbox.ShardedTables {
			f, col, _ := m.TableFunction(tb)
			owned := m.Owned(f, l.ShardID, col.Column)
			owned.Negate = true
			where, args := owned.SQL(dbutil.QuoteIdent)
			var stray, total int64
			if err := db.QueryRow("SELECT COUNT(*) FROM "+dbutil.Table(l.Schema, tb)+" WHERE "+where, args...).Scan(&stray); err != nil {
				c.t.Fatalf("shard %d %s: %v", l.ShardID, tb, err)
			}
			if stray != 0 {
				c.t.Errorf("shard %d (%s) holds %d %s rows it does not own", l.ShardID, l.Schema, stray, tb)
			}
			db.QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(l.Schema, tb)).Scan(&total)
			counts[l.ShardID] += total
		}
	}
	return counts
}

func (c *cluster) serverIndex(addr string) int {
	if i, ok := c.via[addr]; ok {
		return i
	}
	for i := 1; i <= 3; i++ {
		if c.env.Addr(i).String() == addr {
			return i
		}
	}
	c.t.Fatalf("unknown server %s", addr)
	return 0
}

// rowCounts counts the sharded tables' rows in every seeded schema.
func (c *cluster) rowCounts() []int64 {
	var out []int64
	for _, sh := range c.shards {
		db := c.env.DB(c.t, c.serverIndex(sh.Server), "")
		for _, tb := range sandbox.ShardedTables {
			var n int64
			db.QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(sh.Schema, tb)).Scan(&n)
			out = append(out, n)
		}
	}
	return out
}

func (c *cluster) totalRows() int64 {
	var n int64
	for _, v := range c.ownership() {
		n += v
	}
	return n
}

// Range split under load: the upper half moves; writes to keys that stay never fail.
func TestRangeSplitUnderLoad(t *testing.T) {
	const seeded = 6000
	c := newCluster(t, "e2e_split", []int{1, 1}, []int{seeded, 1000})
	total := c.totalRows()
	lo := c.shards[0].Lower
	at := lo + 1 + seeded/2
	lp := c.startLoad(300, fmt.Sprintf("staying=%d-%d", lo+1, at), fmt.Sprintf("moving=%d-%d", at, at+seeded), c.keys("other", 2, 1000))
	r := c.mustRun("split", "--shard", "1", "--at", fmt.Sprint(at), "--to", c.env.Addr(3).String(), "--yes", "-o", "json")
	st := lp.stop(t)
	var sum moveSummary
	json.Unmarshal([]byte(r.stdout), &sum)
	if sum.State != "done" || sum.Result.BlackoutMS <= 0 {
		t.Fatalf("split summary: %s", r.stdout)
	}
	for _, g := range []string{"staying", "other"} {
		if s := st.Groups[g]; s.Errors != 0 || s.Retries != 0 || s.Acked == 0 {
			t.Errorf("group %s saw errors or retries during the split: %+v", g, s)
		}
	}
	if s := st.Groups["moving"]; s.Errors != 0 {
		t.Errorf("moving keys failed: %+v", s)
	}
	c.checkLedger(lp)
	m, _ := c.store.Load(ctx)
	f, _ := m.Function("employees")
	res, _ := m.Lookup(f, fmt.Sprint(at))
	if res.Location.Addr() != c.env.Addr(3) || res.Mapping.Lower.Int != at {
		t.Fatalf("key %d resolves to %+v", at, res)
	}
	if res2, _ := m.Lookup(f, fmt.Sprint(at-1)); res2.Location.ShardID != c.shards[0].ShardID {
		t.Fatalf("key %d left shard 1: %+v", at-1, res2)
	}
	c.ownership()
	// Global tables were copied to the new shard.
	var n int
	c.db(3).QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(res.Location.Schema, "departments")).Scan(&n)
	if n != 9 {
		t.Errorf("new shard has %d departments, want 9", n)
	}
	_ = total
}

// Hash split: a new ring point takes half of a shard's arc.
func TestHashSplitAndMergeUnderLoad(t *testing.T) {
	c := newClusterOpts(t, "e2e_hsplit", []int{1, 2}, []int{3000, 3000}, true)
	c.env.NeedMD5(t) // hash arcs: the fence and the copy hash inside the server
	before := c.totalRows()
	lp := c.startLoad(300, "all=1-12000")
	r := c.mustRun("split", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "-o", "json")
	var sum moveSummary
	json.Unmarshal([]byte(r.stdout), &sum)
	if sum.State != "done" || sum.Result.RowsCopied == 0 {
		t.Fatalf("hash split: %s\n%s", r.stdout, r.stderr)
	}
	m, _ := c.store.Load(ctx)
	if len(m.Locations) != 3 {
		t.Fatalf("locations after hash split: %+v", m.Locations)
	}
	newID := m.Locations[2].ShardID
	c.ownership()
	// Merge the new shard back into shard 1 (its predecessor on the ring).
	c.mustRun("merge", "--shard", fmt.Sprint(newID), "--into", "1", "--yes")
	st := lp.stop(t)
	if st.Errors != 0 {
		t.Errorf("load errors: %+v", st)
	}
	c.checkLedger(lp)
	c.ownership()
	m, _ = c.store.Load(ctx)
	if len(m.Locations) != 2 || len(m.Mappings) != 2 {
		t.Fatalf("after merge: %+v %+v", m.Locations, m.Mappings)
	}
	_ = before
}

// Range merge under load, and the refusals of merge and split.
func TestRangeMergeUnderLoad(t *testing.T) {
	c := newCluster(t, "e2e_merge", []int{1, 2, 1}, []int{2000, 2000, 500})
	lp := c.startLoad(300, c.keys("moving", 2, 2000), c.keys("staying", 1, 2000), c.keys("other", 3, 500))
	c.mustRun("merge", "--shard", "2", "--into", "1", "--yes")
	st := lp.stop(t)
	for _, g := range []string{"staying", "other"} {
		if s := st.Groups[g]; s.Errors != 0 || s.Retries != 0 {
			t.Errorf("group %s: %+v", g, s)
		}
	}
	if st.Groups["moving"].Errors != 0 {
		t.Errorf("moving: %+v", st.Groups["moving"])
	}
	c.checkLedger(lp)
	m, _ := c.store.Load(ctx)
	if len(m.Locations) != 2 {
		t.Fatalf("shard 2's location not removed: %+v", m.Locations)
	}
	if ms := m.ShardMappings(1); len(ms) != 1 || ms[0].Upper == nil || ms[0].Upper.Int != c.shards[2].Lower {
		t.Fatalf("mappings not merged: %+v", ms)
	}
	if schemaExists(t, c.db(2), c.shards[1].Schema) {
		t.Error("merged shard's schema still exists")
	}
	c.ownership()
}

func TestMergeAndSplitRefusals(t *testing.T) {
	testenv.FlavorNeutral(t)
	c := newCluster(t, "e2e_mref", []int{1, 2, 1}, []int{300, 300, 300})
	snap := func() string {
		m, _ := c.store.Load(ctx)
		b, _ := json.Marshal(m)
		return string(b) + fmt.Sprint(c.rowCounts())
	}
	base := snap()
	expect := func(name, want string, args ...string) {
		t.Helper()
		r := c.run(nil, append(args, "--yes")...)
		if r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: exit %d %q, want 2 mentioning %q", name, r.code, r.stderr, want)
		}
		if s := snap(); s != base {
			t.Errorf("%s changed something", name)
		}
	}
	lo := c.shards[0].Lower
	expect("at outside the range", "must be inside", "split", "--shard", "1", "--at", fmt.Sprint(c.shards[1].Lower+5), "--to", c.env.Addr(3).String())
	expect("at the lower bound", "must be inside", "split", "--shard", "1", "--at", fmt.Sprint(lo), "--to", c.env.Addr(3).String())
	expect("merge non-adjacent", "not adjacent", "merge", "--shard", "3", "--into", "1")
	expect("merge into itself", "into itself", "merge", "--shard", "2", "--into", "2")

	// A leftover row in shard 1 with a key shard 2 owns: primary-key collision.
	s1, s2 := c.db(1), c.db(2)
	key := c.shards[1].Lower + 1
	s1.Exec("INSERT INTO "+dbutil.Table(c.shards[0].Schema, "employees")+" (emp_no, birth_date, first_name, last_name, gender, hire_date) VALUES (?, '1960-01-01', 'Left', 'Over', 'M', '1990-01-01')", key)
	base = snap()
	expect("primary key collision", fmt.Sprint(key), "merge", "--shard", "2", "--into", "1")
	s1.Exec("DELETE FROM "+dbutil.Table(c.shards[0].Schema, "employees")+" WHERE emp_no = ?", key)

	// A unique-key collision on a sharded table with a unique column.
	for _, x := range []struct {
		db     *sql.DB
		schema string
		id     int64
	}{{s1, c.shards[0].Schema, lo + 1}, {s2, c.shards[1].Schema, key}} {
		for _, q := range []string{
			"CREATE TABLE " + dbutil.Table(x.schema, "badges") + " (emp_no INT PRIMARY KEY, badge VARCHAR(20) NOT NULL, UNIQUE KEY badge (badge))",
			"INSERT INTO " + dbutil.Table(x.schema, "badges") + " VALUES (?, 'B-0001')",
		} {
			var err error
			if strings.Contains(q, "?") {
				_, err = x.db.Exec(q, x.id)
			} else {
				_, err = x.db.Exec(q)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.store.AddColumn(ctx, "badges", "emp_no", "employees"); err != nil {
		t.Fatal(err)
	}
	base = snap()
	expect("unique key collision", "B-0001", "merge", "--shard", "2", "--into", "1")

	// LIST shards do not split by key.
	fid, _ := c.store.AddFunction(ctx, "regions", shardmap.List, "STRING")
	_ = fid
	id, _ := c.store.AddShard(ctx, "127.0.0.1", c.env.Addr(1).Port, c.shards[0].Schema+"_list")
	c.store.AddPoint(ctx, "regions", "eu", id)
	base = snap()
	expect("split a LIST shard", "LIST", "split", "--shard", fmt.Sprint(id), "--at", "x", "--to", c.env.Addr(3).String())
}

// On servers as installed, a hash split or merge needs MD5() inside the
// server (its fence triggers, copy filter and cleanup compute ring
// positions there): MySQL 9.6+ has none, so both are refused before anything
// changes, naming the statement that adds it, while a move of the same
// hash-mapped shard needs nothing. MariaDB has MD5(), and the same runs are
// accepted; with the component in, so are they on MySQL.
func TestHashSplitNeedsMD5InTheServer(t *testing.T) {
	c := newClusterOpts(t, "e2e_catmd5", []int{1, 2}, []int{200, 200}, true)
	split := []string{"split", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes"}
	merge := []string{"merge", "--shard", "2", "--into", "1", "--yes"}
	before := catState(t, c)
	for _, args := range [][]string{split, merge} {
		r := c.run(nil, append(args, "--dry-run")...)
		if !testenv.MySQL() {
			if r.code != 0 {
				t.Fatalf("%v on MariaDB: exit %d\n%s", args, r.code, r.stderr)
			}
			continue
		}
		if r.code != 2 || !strings.Contains(r.stderr, "INSTALL COMPONENT 'file://component_classic_hashing'") {
			t.Fatalf("%v on a stock MySQL: exit %d\n%s", args, r.code, r.stderr)
		}
		if r := c.run(nil, args...); r.code != 2 {
			t.Fatalf("%v on a stock MySQL: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	c.mustRun("move", "--shard", "2", "--to", c.env.Addr(3).String(), "--dry-run")
	if after := catState(t, c); after != before {
		t.Fatalf("refused runs changed something:\n%s", lineDiff(before, after))
	}
	c.env.NeedMD5(t)
	c.mustRun(append(split, "--dry-run")...)
}
