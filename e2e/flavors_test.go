package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/schemaobj"
)

// TestMoveAcrossFlavors: a shard moves to another server and back under the
// ledger load, each move killed once and resumed; every acknowledged write
// ends at its key's shard, and the rows the load does not touch are the same
// as before. One subtest per other server (testenv.Others): the other flavor
// (MariaDB → MySQL → MariaDB on the MariaDB pass, the reverse on the MySQL
// pass) and MariaDB 11.8 (10.11 → 11.8 → 10.11, and MySQL 9.7 → MariaDB
// 11.8 → MySQL 9.7).
func TestMoveAcrossFlavors(t *testing.T) {
	acrossEach(t, moveAcross)
}

// acrossEach runs f against each other server (testenv.Others), the
// subtests in parallel: each has its own schemas and other server, and the
// pass waits for the longer of them rather than their sum.
func acrossEach(t *testing.T, f func(t *testing.T, k testenv.Kind)) {
	s := testenv.NewSubtests(t)
	for _, k := range testenv.Others() {
		s.RunParallel(k.String(), func(t *testing.T) { f(t, k) })
	}
}

// acrossName is a cross-server test's cluster name for the other server k:
// each kind's subtest has schemas of its own.
func acrossName(base string, k testenv.Kind) string {
	if k == testenv.MariaDB118 {
		return base + "118"
	}
	return base
}

func moveAcross(t *testing.T, k testenv.Kind) {
	other := testenv.Other(t, k)
	const seeded = 1500
	c := newCluster(t, acrossName("e2e_xflavor", k), []int{1, 1}, []int{seeded, 300})
	schema := c.shards[0].Schema
	before := tableSums(t, c.db(1), schema, c.untouchedBelow(1, seeded))
	lp := c.startLoad(200, c.keys("moving", 1, seeded), c.keys("staying", 2, 300))
	c.killThenResume("after:copy", []string{"move", "--shard", "1", "--to", other.Addr(1).String(), "--yes", "--chunk-rows", "500"})
	odb := openAt(t, other.Addr(1))
	if got := tableSums(t, odb, schema, c.untouchedBelow(1, seeded)); !sameSums(before, got) {
		t.Errorf("on the %s server the rows differ: before %v, after %v", k, before, got)
	}
	for _, f := range planFiles(t, c.planDir) {
		_ = os.Remove(f)
	}
	c.killThenResume("during:catchup", []string{"move", "--shard", "1", "--to", c.env.Addr(2).String(), "--yes", "--chunk-rows", "500"})
	st := lp.stop(t)
	if g := st.Groups["moving"]; g.Errors != 0 || g.Acked == 0 {
		t.Errorf("writes to the moving shard failed: %+v", g)
	}
	c.checkLedger(lp)
	c.wantShardAt(1, 2)
	if got := tableSums(t, c.db(2), schema, c.untouchedBelow(1, seeded)); !sameSums(before, got) {
		t.Errorf("back on %s the rows differ: before %v, after %v", testenv.This(), before, got)
	}
	if schemaExists(t, odb, schema) {
		t.Errorf("the %s server still has %s after the move back", k, schema)
	}
}

func sameSums(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// xflavorSchemas are the corpus schemas moved across flavors: a child that
// references its parent by id with triggers, a view and routines, and the
// data types.
var xflavorSchemas = []string{"child_by_id", "data_types"}

// TestCorpusAcrossFlavors: the corpus's child_by_id and data_types schemas,
// in one shard, move to the other flavor and back under the ledger load
// (killed after create, and during catch-up on the way back, each resumed).
// The dry run lists the translations; every table is the same row by row on
// the other flavor and back home; back home every table's SHOW CREATE TABLE
// is the original modulo what docs/servers.md says changes; every object is
// there on both sides; 'verify' compares the two flavors clean.
//
// One subtest per other server (testenv.Others): on MariaDB 11.8 the corpus
// goes 10.11 → 11.8 → 10.11 (or MySQL → 11.8 → MySQL) the same way.
func TestCorpusAcrossFlavors(t *testing.T) {
	acrossEach(t, corpusAcross)
}

func corpusAcross(t *testing.T, k testenv.Kind) {
	other := testenv.Other(t, k)
	cross := k.MySQL() != testenv.MySQL()
	c := newCluster(t, acrossName("e2e_xcorpus", k), []int{1, 1}, []int{120, 60})
	sh := c.shards[0]
	src := c.db(1)
	for _, s := range xflavorSchemas {
		execScript(t, src, sh.Schema, readFile(t, filepath.Join("../testdata/schemas", s, "schema.sql")))
	}
	tbls := column[string](t, src, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME", sh.Schema)
	objects, err := schemaobj.Read(ctx, src, sh.Schema, fence.TriggerPrefix)
	if err != nil {
		t.Fatal(err)
	}
	// Rows the load does not touch, and every definition, before.
	untouched := c.untouchedBelow(1, 120)
	rows := func(db *sql.DB) map[string][]string {
		out := map[string][]string{}
		for _, tb := range tbls {
			q := "SELECT * FROM " + dbutil.Table(sh.Schema, tb)
			if has := column[int](t, db, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = 'emp_no'", sh.Schema, tb); has[0] > 0 {
				q += fmt.Sprintf(" WHERE emp_no < %d", untouched)
			}
			d := testenv.Dump(t, db, q)
			sort.Strings(d)
			out[tb] = d
		}
		return out
	}
	creates := func(db *sql.DB) map[string]string {
		out := map[string]string{}
		for _, tb := range tbls {
			var n, ddl string
			if err := db.QueryRow("SHOW CREATE TABLE "+dbutil.Table(sh.Schema, tb)).Scan(&n, &ddl); err != nil {
				t.Fatal(err)
			}
			out[tb] = ddl
		}
		return out
	}
	before, defs := rows(src), creates(src)

	oaddr := other.Addr(1).String()
	dry := c.mustRun("move", "--shard", "1", "--to", oaddr, "--dry-run")
	for _, o := range objects {
		if !strings.Contains(dry.stdout, o.String()+": ") {
			t.Errorf("--dry-run does not list %s:\n%s", o, dry.stdout)
		}
	}
	if cross && !testenv.MySQL() && !strings.Contains(dry.stdout, "translated for the target's flavor") {
		t.Errorf("--dry-run of a MariaDB -> MySQL move lists no translation (the objects' sql_mode has NO_AUTO_CREATE_USER):\n%s", dry.stdout)
	}
	t.Logf("dry run:\n%s", dry.stdout)
	var dryJSON struct {
		Translations []struct{ Object, From, To string }
	}
	if err := json.Unmarshal([]byte(c.mustRun("move", "--shard", "1", "--to", oaddr, "--dry-run", "-o", "json").stdout), &dryJSON); err != nil {
		t.Fatal(err)
	}
	if cross && !testenv.MySQL() && len(dryJSON.Translations) == 0 {
		t.Error("--dry-run -o json lists no translation")
	}
	if !cross && len(dryJSON.Translations) != 0 {
		t.Errorf("--dry-run -o json lists translations between two MariaDB versions: %+v", dryJSON.Translations)
	}

	lp := c.startLoad(100, c.keys("moving", 1, 120), c.keys("staying", 2, 60))
	c.killThenResume("after:create", []string{"move", "--shard", "1", "--to", oaddr, "--yes", "--chunk-rows", "50", "--keep-source"})
	odb := openAt(t, other.Addr(1))
	lp1 := lp.stop(t)
	if g := lp1.Groups["moving"]; g.Errors != 0 || g.Acked == 0 {
		t.Errorf("writes to the moving shard failed: %+v", g)
	}
	c.checkLedger(lp)
	diffRows(t, "on the "+k.String()+" server", before, rows(odb))
	got, err := schemaobj.Read(ctx, odb, sh.Schema, fence.TriggerPrefix)
	if err != nil || len(got) != len(objects) {
		t.Errorf("the %s server has objects %v (%v), want %d", k, got, err, len(objects))
	}
	for _, o := range got {
		if o.Kind == schemaobj.View {
			if _, err := odb.Exec("SELECT * FROM " + dbutil.Table(sh.Schema, o.Name) + " LIMIT 1"); err != nil {
				t.Errorf("view %s on the %s server: %v", o.Name, k, err)
			}
		}
	}
	// The kept source (fenced since the cutover, so without the load's
	// later writes) against the copy on the other flavor, where the shard
	// now lives: verify names the rows the load changed since, repair
	// copies them over, and the second pass finds the two flavors equal (a
	// false mismatch of a type or collation would survive the repair).
	if r := c.run(nil, "verify", "--shard", "1", "--against", c.env.Addr(1).String()); r.code != 5 || !strings.Contains(r.stdout, "emp_no=") {
		t.Errorf("verify of the stale source across flavors: exit %d, want 5 naming the rows the load changed\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := c.run(nil, "verify", "--shard", "1", "--against", c.env.Addr(1).String(), "--repair"); r.code != 0 {
		t.Errorf("verify --repair across flavors: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, f := range planFiles(t, c.planDir) {
		_ = os.Remove(f)
	}
	// As the cleanup step drops a schema: the fence's CREATE TRIGGER under
	// writes can leave a MariaDB trigger backup behind, which a plain DROP
	// DATABASE fails on (seen in this test: departments.TRG-, error 1010).
	if err := dbutil.DropSchema(ctx, src, sh.Schema, tbls); err != nil {
		t.Fatal(err)
	}

	lp2 := c.startLoad(100, c.keys("moving", 1, 120), c.keys("staying", 2, 60))
	c.killThenResume("during:catchup", []string{"move", "--shard", "1", "--to", c.env.Addr(2).String(), "--yes", "--chunk-rows", "50"})
	c.stopCheck(lp2)
	c.wantShardAt(1, 2)
	home := c.db(2)
	diffRows(t, "back on "+testenv.This().String(), before, rows(home))
	after := creates(home)
	for _, tb := range tbls {
		if a, b := normCreate(defs[tb]), normCreate(after[tb]); a != b {
			t.Errorf("table %s after the round trip differs beyond the documented translations:\n%s\nwas\n%s", tb, after[tb], defs[tb])
		}
	}
	if schemaExists(t, odb, sh.Schema) {
		t.Errorf("the %s server keeps %s after the move back", k, sh.Schema)
	}
}

func diffRows(t *testing.T, where string, want, got map[string][]string) {
	t.Helper()
	for tb, w := range want {
		g := got[tb]
		if strings.Join(w, "\n") == strings.Join(g, "\n") {
			continue
		}
		for i := 0; i < len(w) || i < len(g); i++ {
			var a, b string
			if i < len(w) {
				a = w[i]
			}
			if i < len(g) {
				b = g[i]
			}
			if a != b {
				t.Errorf("%s: table %s differs (%d rows, want %d); first at %d:\n got %s\nwant %s", where, tb, len(g), len(w), i, b, a)
				break
			}
		}
	}
}

// The differences docs/servers.md lists for a round trip MariaDB -> MySQL
// -> MariaDB (and back the other way): integer display widths, where a
// column's CHECK is printed (MySQL prints a column's CHECK as a named
// table constraint), DEFAULT NULL on TEXT and BLOB, and the character set
// introducers MySQL writes into a generated column's expression.
var (
	displayWidthRE = regexp.MustCompile(`\b(tinyint|smallint|mediumint|int|bigint)\(\d+\)`)
	columnCheckRE  = regexp.MustCompile(" CHECK \\(json_valid\\(`[^`]+`\\)\\)")
	tableCheckRE   = regexp.MustCompile("(?m)^\\s*CONSTRAINT `[^`]+` CHECK \\(json_valid\\(`[^`]+`\\)\\),?\\n")
	autoIncRE      = regexp.MustCompile(` AUTO_INCREMENT=\d+`)
)

func normCreate(s string) string {
	s = displayWidthRE.ReplaceAllString(s, "$1")
	s = tableCheckRE.ReplaceAllString(s, "")
	s = columnCheckRE.ReplaceAllString(s, "")
	s = autoIncRE.ReplaceAllString(s, "")
	s = strings.ReplaceAll(s, " DEFAULT NULL", "")
	s = strings.ReplaceAll(s, "_utf8mb4'", "'")
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, strings.TrimSuffix(strings.TrimSpace(l), ","))
	}
	return strings.Join(lines, "\n")
}

// TestSplitMergeRevertAcrossFlavors: under the ledger load, the upper half
// of a range shard splits onto the other flavor's server (killed after
// catch-up, resumed), merges back into its neighbour on this flavor, and a
// move onto the other flavor with a reverse window is reverted (the reverse
// tail reads the other flavor's binlog and GTIDs) and completed on the way
// back. Every acknowledged write ends at its key's shard. One subtest per
// other server (testenv.Others): on MariaDB 11.8, a split from 10.11 onto
// 11.8, a merge back, and an upgrade by a move onto 11.8 switched back to
// 10.11 inside its window, forward again, and completed there.
func TestSplitMergeRevertAcrossFlavors(t *testing.T) {
	acrossEach(t, splitMergeRevertAcross)
}

func splitMergeRevertAcross(t *testing.T, k testenv.Kind) {
	other := testenv.Other(t, k)
	oaddr := other.Addr(1).String()
	const seeded = 400
	c := newCluster(t, acrossName("e2e_xsplit", k), []int{1, 1}, []int{seeded, 200})
	lo := c.shards[0].Lower
	at := lo + 1 + seeded/2
	lp := c.startLoad(100, fmt.Sprintf("staying=%d-%d", lo+1, at), fmt.Sprintf("moving=%d-%d", at, lo+seeded), c.keys("other", 2, 200))
	c.killThenResume("after:catchup", []string{"split", "--shard", "1", "--at", fmt.Sprint(at), "--to", oaddr, "--yes", "--chunk-rows", "100", "--prune-chunk-rows", "100"})
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := m.Function("employees")
	res, err := m.Lookup(f, fmt.Sprint(at))
	if err != nil || res.Location.Addr().String() != oaddr {
		t.Fatalf("after the split key %d resolves to %+v (%v), want a shard on %s", at, res, err, oaddr)
	}
	newID := res.Location.ShardID
	for _, p := range planFiles(t, c.planDir) {
		_ = os.Remove(p)
	}
	c.killThenResume("after:copy", []string{"merge", "--shard", fmt.Sprint(newID), "--into", "1", "--yes", "--chunk-rows", "100", "--prune-chunk-rows", "100"})
	c.stopCheck(lp)
	c.wantShardAt(1, 1)
	if got := c.mustLookup(at); got != 1 {
		t.Fatalf("after the merge key %d is on shard %d, want 1", at, got)
	}
	for _, p := range planFiles(t, c.planDir) {
		_ = os.Remove(p)
	}

	// A move onto the other server, switched back inside its window (the
	// reverse tail reads the other server's binlog and GTIDs), forward
	// again, and completed there.
	lp1 := c.startLoad(60, fmt.Sprintf("moving=%d-%d", c.shards[1].Lower+1, c.shards[1].Lower+100))
	mv := c.startBG(nil, "move", "--shard", "2", "--to", oaddr, "--yes", "--reverse-window", "3m", "--max-blackout", "5s", "--chunk-rows", "100")
	p := c.waitWin("the window", 3*time.Minute, mv, inWindow(plans.SideTarget, time.Now()))
	c.stopCheck(lp1)
	lp2 := c.startLoad(60, fmt.Sprintf("moving=%d-%d", c.shards[1].Lower+100, c.shards[1].Lower+150))
	lp2.waitWriting(t, phaseWrites)
	c.switchWindow(p.ID)
	c.waitWin("the tail to the target", 90*time.Second, mv, inWindow(plans.SideSource, time.Now()))
	c.stopCheck(lp2, lp1)
	lp3 := c.startLoad(60, fmt.Sprintf("moving=%d-%d", c.shards[1].Lower+150, c.shards[1].Lower+200))
	lp3.waitWriting(t, phaseWrites)
	c.switchWindow(p.ID)
	c.waitWin("the tail back to the source", 90*time.Second, mv, inWindow(plans.SideTarget, time.Now()))
	c.mustRun("plan", "complete", p.ID, "--wait", "90s")
	if code := mv.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("the move ended with exit %d\n%s", code, mv.err.String())
	}
	c.stopCheck(lp3, lp1, lp2)
	m, err = c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := m.Location(2); l.Addr().String() != oaddr {
		t.Fatalf("after complete shard 2 is at %s, want %s (%s)", l.Addr(), oaddr, k)
	}
}

// switchWindow runs 'plan revert' (a switch to the other side of the
// window). Exit 3 is "run it again": under the machine's load the fence on
// the serving copy can miss its budget while the load's writes hold it.
func (c *cluster) switchWindow(id string) {
	c.t.Helper()
	for try := 1; ; try++ {
		r := c.run(nil, "plan", "revert", id, "--wait", "90s")
		if r.code == 0 {
			return
		}
		if r.code != 3 || try == 3 {
			c.t.Fatalf("plan revert: exit %d\n%s", r.code, r.stderr)
		}
		c.t.Logf("plan revert, try %d: exit 3, run again: %s", try, strings.TrimSpace(r.stderr))
	}
}

// mustLookup is the shard key k routes to.
func (c *cluster) mustLookup(k int64) int {
	c.t.Helper()
	m, err := c.store.Load(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	f, _ := m.Function("employees")
	res, err := m.Lookup(f, fmt.Sprint(k))
	if err != nil {
		c.t.Fatal(err)
	}
	return res.Location.ShardID
}

// TestMixedFlavorsRefused: a definition the other flavor cannot take refuses
// the move at planning (exit 2), naming the table, the column or index and
// what to change, and nothing is created on the target. MariaDB -> MySQL: an
// INET6 column; MySQL -> MariaDB: a functional index.
func TestMixedFlavorsRefused(t *testing.T) {
	other := testenv.OtherFlavor(t)
	c := newCluster(t, "e2e_mixed", []int{2}, []int{100})
	schema := c.shards[0].Schema
	stmt, want := "CREATE TABLE hosts (emp_no INT NOT NULL PRIMARY KEY, addr INET6 NULL)", []string{"table hosts column `addr`", "VARCHAR(39)"}
	if testenv.MySQL() {
		stmt, want = "CREATE TABLE hosts (emp_no INT NOT NULL PRIMARY KEY, name VARCHAR(20), KEY lower_name ((LOWER(name))))", []string{"table hosts index `lower_name`", "generated column"}
	}
	if _, err := c.db(2).Exec("CREATE TABLE " + dbutil.Table(schema, "hosts") + strings.TrimPrefix(stmt, "CREATE TABLE hosts")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--dry-run"}, {"--yes"}} {
		r := c.run(nil, append([]string{"move", "--shard", "1", "--to", other.Addr(1).String()}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, want[0]) || !strings.Contains(r.stderr, want[1]) {
			t.Fatalf("move %v of a %s shard with %s to %s: exit %d, want 2 naming %q\n%s", args, testenv.Flavor(), stmt, testenv.OtherFlavorName(), r.code, want, r.stderr)
		}
		t.Logf("refused: %s", strings.TrimSpace(r.stderr))
	}
	if schemaExists(t, openAt(t, other.Addr(1)), schema) {
		t.Error("the refused move created the target schema")
	}
}
