package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/router"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/tables"
)

// corpusOp is one operation the corpus runs over every schema: a kill -9 at
// one point, then resume to the end. Where abortAt is set, a first run of
// the same operation is killed there and aborted before it, so the run that
// finishes starts from what an abort left (the aborts stop at different
// steps: after create, after catch-up into a live schema, behind the fence).
type corpusOp struct {
	name    string
	servers []int
	sizes   []int
	fault   string
	abortAt string // "": no aborted run first
	args    func(c *cluster) []string
	groups  func(c *cluster) []string
}

const corpusSeeded = 200

var corpusOps = []corpusOp{
	{name: "move", servers: []int{1, 1}, sizes: []int{corpusSeeded, 100}, fault: "after:create", abortAt: "after:fence",
		args: func(c *cluster) []string { return []string{"move", "--shard", "1", "--to", c.env.Addr(3).String()} },
		groups: func(c *cluster) []string {
			return []string{c.keys("moving", 1, corpusSeeded), c.keys("staying", 2, 100)}
		}},
	{name: "split", servers: []int{1, 1}, sizes: []int{corpusSeeded, 100}, fault: "after:cutover", abortAt: "after:create",
		args: func(c *cluster) []string {
			return []string{"split", "--shard", "1", "--at", fmt.Sprint(c.shards[0].Lower + 1 + corpusSeeded/2), "--to", c.env.Addr(3).String()}
		},
		groups: func(c *cluster) []string {
			lo := c.shards[0].Lower
			return []string{fmt.Sprintf("staying=%d-%d", lo+1+corpusSeeded/4, lo+1+corpusSeeded/2), fmt.Sprintf("moving=%d-%d", lo+1+corpusSeeded/2, lo+2*corpusSeeded)}
		}},
	{name: "merge", servers: []int{1, 2}, sizes: []int{corpusSeeded / 2, corpusSeeded / 2}, fault: "after:copy", abortAt: "after:catchup",
		args: func(c *cluster) []string { return []string{"merge", "--shard", "2", "--into", "1"} },
		groups: func(c *cluster) []string {
			return []string{c.keys("moving", 2, corpusSeeded/2), c.keys("staying", 1, corpusSeeded/2)}
		}},
}

// listCorpusOps run over a LIST schema (corpus.conf "function list"): the
// key moves (tenants into a shard on another server, one tenant onto a new
// shard of its own), a merge of two LIST shards and a whole-shard move, a
// few kill points rather than every one (TestKeyMoves has the others).
var listCorpusOps = []corpusOp{
	// The target's AUTO_INCREMENT counter lies below the source's (the
	// schema puts a lower shard's above): the plan raises it.
	{name: "keys-into", servers: []int{1, 2}, sizes: []int{corpusSeeded, corpusSeeded}, fault: "after:copy",
		args: func(c *cluster) []string {
			return []string{"move", "--shard", "1", "--keys", "101,111,112", "--into", "2"}
		},
		groups: func(c *cluster) []string {
			return []string{"moving=111-113", "staying=113-300", c.keys("into", 2, corpusSeeded)}
		}},
	{name: "keys-isolate", servers: []int{1, 2}, sizes: []int{corpusSeeded, corpusSeeded}, fault: "during:fence:half",
		args: func(c *cluster) []string {
			return []string{"move", "--shard", "1", "--keys", "121", "--to", c.env.Addr(3).String()}
		},
		groups: func(c *cluster) []string { return []string{"moving=121-122", "below=102-121", "above=122-300"} }},
	{name: "merge", servers: []int{1, 2}, sizes: []int{corpusSeeded, corpusSeeded / 2}, fault: "after:catchup",
		args: func(c *cluster) []string { return []string{"merge", "--shard", "2", "--into", "1"} },
		groups: func(c *cluster) []string {
			return []string{c.keys("moving", 2, corpusSeeded/2), c.keys("staying", 1, corpusSeeded)}
		}},
	{name: "move", servers: []int{1, 2}, sizes: []int{corpusSeeded, 100}, fault: "after:create",
		args: func(c *cluster) []string { return []string{"move", "--shard", "1", "--to", c.env.Addr(3).String()} },
		groups: func(c *cluster) []string {
			return []string{c.keys("moving", 1, corpusSeeded), c.keys("staying", 2, 100)}
		}},
}

// corpusConf is a corpus directory's corpus.conf: the seed's function
// ("function list": one list point per employee, the LIST operations) and
// the shard key column of its sharded tables ("key", default emp_no).
type corpusConf struct {
	list bool
	key  string
}

func readCorpusConf(t *testing.T, dir string) corpusConf {
	conf := corpusConf{key: "emp_no"}
	for _, line := range strings.Split(readFile(t, filepath.Join(dir, "corpus.conf")), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case len(f) == 2 && f[0] == "function" && f[1] == "list":
			conf.list = true
		case len(f) == 2 && f[0] == "key":
			conf.key = f[1]
		default:
			t.Fatalf("%s/corpus.conf: cannot read %q", dir, line)
		}
	}
	return conf
}

// TestCorpus runs every operation over every schema of testdata/schemas
// under the ledger load and the schema's own workload, with a kill -9 and a
// resume (in the MariaDB pass after a run of it killed and aborted, checked
// too), then checks what the corpus README lists. No code
// here knows any one schema. The subtests run in parallel: each has its own
// shard map, schemas, plan directory and load.
func TestCorpus(t *testing.T) {
	st := testenv.NewSubtests(t)
	dirs, err := filepath.Glob("../testdata/schemas/*/schema.sql")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no corpus schemas (%v)", err)
	}
	for di, f := range dirs {
		dir := filepath.Dir(f)
		conf := readCorpusConf(t, dir)
		ops := corpusOps
		if conf.list {
			ops = listCorpusOps
		}
		for oi, op := range ops {
			st.RunParallel(filepath.Base(dir)+"/"+op.name, func(t *testing.T) {
				if testenv.FlavorNeutralSkips() {
					// An abort's own work (the target dropped, the fence and
					// the map put back) is the same SQL on both flavors, and
					// TestMoveAbort runs it on each; the corpus's schemas
					// meet both flavors in the operations that copy and tail.
					op.abortAt = ""
				}
				runCorpus(t, dir, conf, op, fmt.Sprintf("e2e_corpus%d_%d", di, oi))
			})
		}
	}
}

func runCorpus(t *testing.T, dir string, conf corpusConf, op corpusOp, name string) {
	start := time.Now()
	c := newClusterSeed(t, name, op.servers, sandbox.SeedConfig{Sizes: op.sizes, List: conf.list})
	keys, sharded, objects := c.loadCorpus(dir, conf.key)
	seededKeys := c.fleetKeys(sharded)
	workload := readFile(t, filepath.Join(dir, "workload.sql"))
	checks := readFile(t, filepath.Join(dir, "checks.sql"))
	first := c.shards[0]
	t.Logf("corpus %s: %d sharded tables %v, %d objects, set up in %s", filepath.Base(dir), len(sharded), sharded, len(objects), time.Since(start).Round(time.Millisecond))

	// --dry-run lists every object and what happens to it.
	dry := c.mustRun(append(op.args(c), "--dry-run")...)
	for _, o := range objects {
		if !strings.Contains(dry.stdout, o.String()+": ") {
			t.Errorf("--dry-run does not list %s:\n%s", o, dry.stdout)
		}
	}

	groups := op.groups(c)
	lp := c.startLoad(100, groups...)
	wl := startWorkload(t, c, keys, workload)
	args := append(op.args(c), "--yes", "--chunk-rows", "100", "--prune-chunk-rows", "100", "--max-blackout", "5s")
	if op.abortAt != "" {
		id := c.killedRun(op.abortAt, args, nil)
		if res := c.run(nil, "plan", "abort", id); res.code != 0 {
			t.Fatalf("plan abort after %s: exit %d\n%s\n%s", op.abortAt, res.code, res.stdout, res.stderr)
		}
		// What the abort put back, before the run below builds on it.
		c.ownership()
		c.checkCorpus(sharded, objects, first.Schema, checks)
	}
	id := c.killedRun(op.fault, args, planFiles(t, c.planDir))
	if res := c.run(nil, "plan", "resume", id); res.code != 0 {
		t.Fatalf("plan resume after %s: exit %d\n%s\n%s", op.fault, res.code, res.stdout, res.stderr)
	}
	done, failed := wl.stop()
	st := lp.stop(t)
	for g, s := range st.Groups {
		if s.Errors != 0 {
			t.Errorf("load group %s saw errors: %+v", g, s)
		}
	}
	t.Logf("workload: %d transactions, %d failed; load acked %d", done, len(failed), st.Acked)
	for _, e := range failed {
		t.Errorf("workload: %s", e)
	}
	c.checkLedger(lp)
	c.ownership()
	// prune guards the shard's triggers too (and puts them back exactly).
	c.mustRun("prune", "--shard", "1")
	c.checkCorpus(sharded, objects, first.Schema, checks)
	// Every key (tenant) each sharded table was seeded with is still in the
	// fleet, on one shard (the workloads never delete a key's last row).
	after := c.fleetKeys(sharded)
	for tb, ks := range seededKeys {
		for k := range ks {
			if after[tb][k] != 1 {
				t.Errorf("%s: key %s is on %d shards after %s, want 1", tb, k, after[tb][k], op.name)
			}
		}
	}
	t.Logf("%s took %s", op.name, time.Since(start).Round(time.Millisecond))
}

// loadCorpus runs the corpus schema of dir in every shard schema of c and
// registers its tables with a column key (emp_no, or corpus.conf's) as
// sharded on it with the employees' function. It returns the employees'
// keys, the sharded corpus tables and the schema objects.
func (c *cluster) loadCorpus(dir, key string) (keys []int64, sharded []string, objects []schemaobj.Object) {
	t := c.t
	schemaSQL := readFile(t, filepath.Join(dir, "schema.sql"))
	for _, sh := range c.shards {
		db := c.env.DB(t, c.serverIndex(sh.Server), "")
		execScript(t, db, sh.Schema, schemaSQL)
		keys = append(keys, column[int64](t, db, "SELECT emp_no FROM "+dbutil.Table(sh.Schema, "employees"))...)
	}
	first := c.shards[0]
	fdb := c.env.DB(t, c.serverIndex(first.Server), "")
	sharded = column[string](t, fdb, `SELECT c.TABLE_NAME FROM information_schema.COLUMNS c JOIN information_schema.TABLES t USING (TABLE_SCHEMA, TABLE_NAME)
		WHERE c.TABLE_SCHEMA = ? AND c.COLUMN_NAME = ? AND t.TABLE_TYPE = 'BASE TABLE' AND c.TABLE_NAME NOT IN ('`+strings.Join(sandbox.ShardedTables, "','")+`') ORDER BY c.TABLE_NAME`, first.Schema, key)
	for _, tb := range sharded {
		if err := c.store.AddColumn(ctx, tb, key, "employees"); err != nil {
			t.Fatal(err)
		}
	}
	objects, err := schemaobj.Read(ctx, fdb, first.Schema, fence.TriggerPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return keys, sharded, objects
}

// checkCorpus checks every shard in the shard map: sharded corpus tables
// hold only owned rows, no foreign key orphans, no fence triggers, no
// schema the shard map does not know, every object present with its exact
// definition, every view selectable, and checks.sql.
func (c *cluster) checkCorpus(sharded []string, objects []schemaobj.Object, origSchema, checks string) {
	t := c.t
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, l := range m.Locations {
		known[l.Addr().String()+"/"+l.Schema] = true
		db := c.env.DB(t, c.serverIndex(l.Addr().String()), "")
		where := fmt.Sprintf("shard %d (%s)", l.ShardID, l.Schema)
		for _, tb := range sharded {
			f, col, _ := m.TableFunction(tb)
			owned := m.Owned(f, l.ShardID, col.Column)
			owned.Negate = true
			w, args := owned.SQL(dbutil.QuoteIdent)
			if n := one[int64](t, db, "SELECT COUNT(*) FROM "+dbutil.Table(l.Schema, tb)+" WHERE "+w, args...); n != 0 {
				t.Errorf("%s holds %d %s rows it does not own", where, n, tb)
			}
		}
		fks, err := tables.ForeignKeys(ctx, db, l.Schema)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range fks {
			var on, notNull []string
			for i := range k.Columns {
				on = append(on, "p."+dbutil.QuoteIdent(k.RefColumns[i])+" = c."+dbutil.QuoteIdent(k.Columns[i]))
				notNull = append(notNull, "c."+dbutil.QuoteIdent(k.Columns[i])+" IS NOT NULL")
			}
			q := "SELECT COUNT(*) FROM " + dbutil.Table(l.Schema, k.Table) + " c LEFT JOIN " + dbutil.Table(k.RefSchema, k.RefTable) + " p ON " +
				strings.Join(on, " AND ") + " WHERE p." + dbutil.QuoteIdent(k.RefColumns[0]) + " IS NULL AND " + strings.Join(notNull, " AND ")
			if n := one[int64](t, db, q); n != 0 {
				t.Errorf("%s: %d orphans of foreign key %s", where, n, k)
			}
		}
		if left, err := fence.Installed(ctx, db, l.Schema); err != nil || len(left) > 0 {
			t.Errorf("%s: fence triggers left: %v %v", where, left, err)
		}
		got, err := schemaobj.Read(ctx, db, l.Schema, fence.TriggerPrefix)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(objects) {
			t.Errorf("%s has %d objects, want %d: %v", where, len(got), len(objects), got)
		}
		for i := 0; i < len(got) && i < len(objects); i++ {
			want, have := objects[i], got[i]
			wantDef := schemaobj.Rename(want.Exact(), origSchema, l.Schema)
			if have.Kind != want.Kind || have.Name != want.Name || have.Enabled != want.Enabled || norm(have.Exact()) != norm(wantDef) {
				t.Errorf("%s: object %d is %s (enabled %v):\n%s\nwant %s (enabled %v):\n%s", where, i, have, have.Enabled, have.Exact(), want, want.Enabled, wantDef)
			}
			if have.Kind == schemaobj.View {
				if _, err := db.Exec("SELECT * FROM " + dbutil.Table(l.Schema, have.Name) + " LIMIT 1"); err != nil {
					t.Errorf("%s: view %s: %v", where, have.Name, err)
				}
			}
		}
		for _, q := range splitSQL(checks) {
			conn := useConn(t, db, l.Schema)
			if testenv.MySQL() { // information_schema.TABLES answers live, not from MySQL's cache
				if _, err := conn.ExecContext(ctx, "SET SESSION information_schema_stats_expiry = 0"); err != nil {
					t.Fatal(err)
				}
			}
			var ok sql.NullInt64
			if err := conn.QueryRowContext(ctx, q).Scan(&ok); err != nil || ok.Int64 != 1 {
				t.Errorf("%s: check failed (%v, %v): %s", where, ok.Int64, err, q)
			}
			conn.Close()
		}
	}
	for i := 1; i <= 3; i++ {
		db := c.env.DB(t, i, "")
		for _, s := range column[string](t, db, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ?", likePrefix(c.name)+"\\_s%") {
			if !known[c.env.Addr(i).String()+"/"+s] {
				t.Errorf("server %d keeps schema %s, which the shard map does not know", i, s)
			}
		}
	}
}

// fleetKeys is, for each sharded table, each key the shards of the map
// hold rows of, with how many shards hold it.
func (c *cluster) fleetKeys(sharded []string) map[string]map[string]int {
	t := c.t
	m, err := c.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int{}
	for _, tb := range sharded {
		_, col, _ := m.TableFunction(tb)
		out[tb] = map[string]int{}
		for _, l := range m.Locations {
			if len(m.ShardMappings(l.ShardID)) == 0 {
				continue // a location nothing routes to (a merged shard's, until removed)
			}
			db := c.env.DB(t, c.serverIndex(l.Addr().String()), "")
			for _, k := range column[string](t, db, "SELECT DISTINCT CAST("+dbutil.QuoteIdent(col.Column)+" AS CHAR) FROM "+dbutil.Table(l.Schema, tb)) {
				out[tb][k]++
			}
		}
	}
	return out
}

func norm(s string) string { return strings.Join(strings.Fields(s), " ") }

// workload runs workload.sql through the router, one transaction at a time.
type workload struct {
	stopc  chan struct{}
	wg     sync.WaitGroup
	done   atomic.Int64
	mu     sync.Mutex
	failed []string
}

func startWorkload(t *testing.T, c *cluster, keys []int64, script string) *workload {
	w := &workload{stopc: make(chan struct{})}
	stmts := splitSQL(script)
	if len(stmts) == 0 {
		return w
	}
	autocommit := strings.Contains(script, autocommitMark)
	rt := router.New(c.store, router.Options{Creds: sandbox.Creds(), TTL: testMapTTL, RetryFor: 30 * time.Second})
	rnd := rand.New(rand.NewSource(1))
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer rt.Close()
		for {
			select {
			case <-w.stopc:
				return
			case <-time.After(30 * time.Millisecond):
			}
			k := keys[rnd.Intn(len(keys))]
			err := rt.Do(ctx, "employees", fmt.Sprint(k), func(_ context.Context, tg router.Target) error {
				var err error
				// An application retries deadlocks and lock wait timeouts
				// (cleanup and abort delete rows next to its writes).
				for try := 0; try < 5; try++ {
					if err = runTx(tg.DB, tg.Schema, k, stmts, autocommit); !dbutil.IsRetryableLockErr(err) {
						break
					}
				}
				return err
			})
			if err != nil {
				w.mu.Lock()
				w.failed = append(w.failed, fmt.Sprintf("key %d: %v", k, err))
				w.mu.Unlock()
				continue
			}
			w.done.Add(1)
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *workload) stop() (int64, []string) {
	select {
	case <-w.stopc:
	default:
		close(w.stopc)
	}
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done.Load(), w.failed
}

func runTx(db *sql.DB, schema string, k int64, stmts []string, autocommit bool) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "USE "+dbutil.QuoteIdent(schema)); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "SET @k = ?", k); err != nil {
		return err
	}
	// A workload that writes a non-transactional (MyISAM) table runs its
	// statements one by one: MySQL with GTIDs refuses such writes inside a
	// multi-statement transaction (error 1785), as its applications know.
	if !autocommit {
		if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
			return err
		}
	}
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			if !autocommit {
				_, _ = conn.ExecContext(ctx, "ROLLBACK")
			}
			return err
		}
	}
	if autocommit {
		return nil
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}

// autocommitMark in workload.sql runs its statements without a transaction.
const autocommitMark = "-- autocommit"

// execScript runs a corpus script in schema on one session.
func execScript(t *testing.T, db *sql.DB, schema, script string) {
	t.Helper()
	conn := useConn(t, db, schema)
	defer conn.Close()
	for _, q := range splitSQL(strings.ReplaceAll(script, "{{schema}}", dbutil.QuoteIdent(schema))) {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("corpus statement in %s: %v\n%s", schema, err, q)
		}
	}
}

func useConn(t *testing.T, db *sql.DB, schema string) *sql.Conn {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "USE "+dbutil.QuoteIdent(schema)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// splitSQL splits a script at its terminator (";", or what DELIMITER sets),
// dropping comment-only lines.
func splitSQL(script string) []string {
	var out []string
	delim := ";"
	var cur strings.Builder
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for _, line := range strings.Split(script, "\n") {
		trim := strings.TrimSpace(line)
		if cur.Len() == 0 && (trim == "" || strings.HasPrefix(trim, "--")) {
			continue
		}
		if f := strings.Fields(trim); len(f) == 2 && strings.EqualFold(f[0], "DELIMITER") {
			flush()
			delim = f[1]
			continue
		}
		if strings.HasSuffix(trim, delim) {
			cur.WriteString(strings.TrimSuffix(trim, delim))
			flush()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	flush()
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func column[T any](t *testing.T, db *sql.DB, q string, args ...any) []T {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func one[T any](t *testing.T, db *sql.DB, q string, args ...any) T {
	t.Helper()
	var v T
	if err := db.QueryRow(q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}
