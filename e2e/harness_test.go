// Package e2e runs the built shardctl binary against real MariaDB servers,
// under a live write load kept in a ledger, and checks at the end that every
// acknowledged write is at its key's current shard and nowhere else.
package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

var bin string

func TestMain(m *testing.M) {
	bin = os.Getenv("SHARDCTL_BIN")
	if bin == "" {
		dir, err := os.MkdirTemp("", "shardctl-bin-")
		if err != nil {
			panic(err)
		}
		bin = filepath.Join(dir, "shardctl")
		out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build shardctl: %v\n%s", err, out)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
	}
	testenv.Main(m)
}

var ctx = context.Background()

// alongside runs a top-level test in parallel with the package's other
// alongside tests, once the sequential tests are done (go test runs two at
// a time on 2 cores). Only tests that touch the shared servers through their
// own schemas and never kill, restart or reconfigure a server may call it
// (TestFaultMatrix crashes and stops servers of a sandbox of its own). It
// takes the tests that mostly wait off the pass's critical path: for faults
// to heal (TestFaultMatrix, 67-74 s a pass at a sixth of a core), a retry
// budget to run out (TestFaultNeverHeals), a stale lock or a window to age
// (the doctor), a router's cache, a revert's back-off, a hook's timeout; the
// crash matrix's CPU runs beside them. (The doctor reads only its own shard
// map's schemas, so the other tests' fences are not its findings.)
func alongside(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// cluster is one test's world: a shard map schema and shards with their own names.
type cluster struct {
	t       *testing.T
	env     *testenv.Env
	name    string
	dir     string
	config  string
	store   *shardmap.Store
	shards  []sandbox.SeededShard
	planDir string
	via     map[string]int // addresses that stand for a server (the fault matrix's proxies)
}

// newCluster seeds len(sizes) range shards of the employees schema; shard k
// lives on server servers[k-1] and holds sizes[k-1] employees (~9 rows each).
// Every router of these tests (the load's, through the config file, and
// the workloads') trusts its cached map for testMapTTL, and every operation
// waits testRouteGrace after a switch before it removes the old copy: the
// same contract as the defaults (grace above the TTL; 500 ms and 1 s, which
// TestStaleRouterWritesNeverVanish covers), some 750 ms shorter for each
// operation of the suite.
const (
	testMapTTL     = 100 * time.Millisecond
	testRouteGrace = 250 * time.Millisecond
)

func newCluster(t *testing.T, name string, servers []int, sizes []int) *cluster {
	t.Helper()
	return newClusterOpts(t, name, servers, sizes, false)
}

// newClusterOpts is newCluster, with hash=true for a HASH function (even ring points).
func newClusterOpts(t *testing.T, name string, servers []int, sizes []int, hash bool) *cluster {
	t.Helper()
	return newClusterSeed(t, name, servers, sandbox.SeedConfig{Sizes: sizes, Hash: hash})
}

// newClusterSeed is newCluster with the seed's function chosen by sc (Hash,
// List) and its sizes in sc.Sizes.
func newClusterSeed(t *testing.T, name string, servers []int, sc sandbox.SeedConfig) *cluster {
	t.Helper()
	return newClusterSeedOn(t, testenv.Get(t), name, servers, sc)
}

// newClusterOn is newCluster on env's servers (a test's own sandbox,
// testenv.Own), the shard map on env's server 1.
func newClusterOn(t *testing.T, env *testenv.Env, name string, servers []int, sizes []int) *cluster {
	t.Helper()
	return newClusterSeedOn(t, env, name, servers, sandbox.SeedConfig{Sizes: sizes})
}

func newClusterSeedOn(t *testing.T, env *testenv.Env, name string, servers []int, sc sandbox.SeedConfig) *cluster {
	t.Helper()
	var addrs []dbutil.Addr
	for _, s := range servers {
		addrs = append(addrs, env.Addr(s))
	}
	return newClusterIn(t, env, name, addrs, sc)
}

// newClusterAt is newClusterOpts with the shards' servers given by address
// (servers outside the shared sandbox); the shard map stays on server 1.
func newClusterAt(t *testing.T, name string, addrs []dbutil.Addr, sizes []int, hash bool) *cluster {
	t.Helper()
	return newClusterAtSeed(t, name, addrs, sandbox.SeedConfig{Sizes: sizes, Hash: hash})
}

func newClusterAtSeed(t *testing.T, name string, addrs []dbutil.Addr, sc sandbox.SeedConfig) *cluster {
	t.Helper()
	return newClusterIn(t, testenv.Get(t), name, addrs, sc)
}

// newClusterIn is newClusterAtSeed on env's servers (a test's own sandbox,
// testenv.Own) instead of the shared sandbox; the shard map is on env's
// server 1.
func newClusterIn(t *testing.T, env *testenv.Env, name string, addrs []dbutil.Addr, sc sandbox.SeedConfig) *cluster {
	t.Helper()
	c := &cluster{t: t, env: env, name: name, dir: t.TempDir()}
	c.planDir = filepath.Join(c.dir, "plans")
	db := env.DB(t, 1, "")
	if _, err := db.Exec("DROP DATABASE IF EXISTS " + dbutil.QuoteIdent(name)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		d := env.DB(t, i, "")
		rows, err := d.Query("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ?", likePrefix(name)+"\\_s%")
		if err != nil {
			t.Fatal(err)
		}
		var old []string
		for rows.Next() {
			var s string
			rows.Scan(&s)
			old = append(old, s)
		}
		rows.Close()
		for _, s := range old {
			d.Exec("DROP DATABASE " + dbutil.QuoteIdent(s))
		}
	}
	c.store = shardmap.New(db, name)
	var err error
	sc.Servers, sc.Creds, sc.Shards, sc.SchemaPrefix = addrs, sandbox.Creds(), len(sc.Sizes), name+"_s"
	c.shards, err = sandbox.Seed(ctx, c.store, sc)
	if err != nil {
		t.Fatal(err)
	}
	c.config = filepath.Join(c.dir, "shardctl.yaml")
	body := fmt.Sprintf("shardmap: %s/%s\nuser: %s\npassword: %s\nplan-dir: %s\nmap-ttl: %s\nroute-grace: %s\n", env.Addr(1), name, sandbox.ToolUser, sandbox.ToolPassword, c.planDir, testMapTTL, testRouteGrace)
	if err := os.WriteFile(c.config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

type result struct {
	code           int
	killed         bool
	stdout, stderr string
}

func (c *cluster) command(extraEnv []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"--config", c.config}, args...)...)
	cmd.Env = append(os.Environ(), extraEnv...)
	return cmd
}

// run runs shardctl to the end.
func (c *cluster) run(extraEnv []string, args ...string) result {
	c.t.Helper()
	cmd := c.command(extraEnv, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.killed = true
		}
	} else if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *cluster) mustRun(args ...string) result {
	c.t.Helper()
	r := c.run(nil, args...)
	if r.code != 0 {
		c.t.Fatalf("shardctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// loadProc is a background 'shardctl load'.
type loadProc struct {
	cmd      *exec.Cmd
	out, err bytes.Buffer
	ledger   string
}

type groupStats struct {
	Acked, Errors, Retries int64
	LongestGap             time.Duration
}

type loadStats struct {
	Elapsed time.Duration
	Acked   int64
	Errors  int64
	Groups  map[string]groupStats
}

// startLoad writes to each group NAME=LO-HI at rate writes/s until stopped.
func (c *cluster) startLoad(rate int, groups ...string) *loadProc {
	c.t.Helper()
	lp := c.startLoadBlocked(rate, groups...)
	lp.waitWriting(c.t, max(5, rate/10))
	return lp
}

// startLoadBlocked is startLoad for keys no write can reach yet (a shard
// whose server is gone until the operation re-points it): it returns as soon
// as the load runs.
func (c *cluster) startLoadBlocked(rate int, groups ...string) *loadProc {
	c.t.Helper()
	lp := &loadProc{ledger: filepath.Join(c.dir, fmt.Sprintf("ledger-%d.jsonl", time.Now().UnixNano()))}
	args := []string{"load", "--rate", fmt.Sprint(rate), "--concurrency", "8", "--ledger", lp.ledger, "-o", "json"}
	for _, g := range groups {
		args = append(args, "--keys", g)
	}
	lp.cmd = c.command(nil, args...)
	lp.cmd.Stdout, lp.cmd.Stderr = &lp.out, &lp.err
	if err := lp.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = lp.cmd.Process.Kill() })
	return lp
}

// waitWriting returns once the ledger holds n acknowledged writes (about
// 100 ms of the load at its pace, the ledger being flushed every 100 ms), so
// the operation that follows starts under the load; a fixed sleep of 700 ms
// did the same, some 450 ms slower, in every test that starts a load.
func (lp *loadProc) waitWriting(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(lp.ledger); err == nil && bytes.Count(b, []byte("\n")) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load acknowledged fewer than %d writes in 15 s\n%s", n, lp.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (lp *loadProc) stop(t *testing.T) loadStats {
	t.Helper()
	_ = lp.cmd.Process.Signal(syscall.SIGTERM)
	if err := lp.cmd.Wait(); err != nil {
		t.Fatalf("load: %v\n%s\n%s", err, lp.out.String(), lp.err.String())
	}
	var st loadStats
	if err := json.Unmarshal(lp.out.Bytes(), &st); err != nil {
		t.Fatalf("load output: %v\n%s", err, lp.out.String())
	}
	return st
}

// checkLedger runs 'shardctl load check' and fails the test on any problem.
func (c *cluster) checkLedger(lp *loadProc) {
	c.t.Helper()
	r := c.run(nil, "load", "check", lp.ledger)
	if r.code != 0 {
		c.t.Fatalf("ledger check failed (exit %d):\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

func (c *cluster) db(server int) *sql.DB { return c.env.DB(c.t, server, "") }

// wantShardAt fails the test unless the shard map locates shard id on server.
func (c *cluster) wantShardAt(id, server int) {
	c.t.Helper()
	m, err := c.store.Load(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	if l, _ := m.Location(id); l.Addr() != c.env.Addr(server) {
		c.t.Fatalf("shard %d is at %s, want %s", id, l.Addr(), c.env.Addr(server))
	}
}

func schemaExists(t *testing.T, db *sql.DB, schema string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// tableSums checksums every table of schema (rows with emp_no below below only, for
// tables the load does not touch it is all rows), NULL-safe, order-independent.
func tableSums(t *testing.T, db *sql.DB, schema string, employeesBelow int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tb := range append([]string{"departments"}, sandbox.ShardedTables...) {
		rows, err := db.Query("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", schema, tb)
		if err != nil {
			t.Fatal(err)
		}
		var cols []string
		for rows.Next() {
			var c string
			rows.Scan(&c)
			cols = append(cols, "COALESCE("+dbutil.QuoteIdent(c)+", '<null>')")
		}
		rows.Close()
		where := ""
		var args []any
		if tb == "employees" {
			where, args = " WHERE emp_no < ?", []any{employeesBelow}
		}
		var n int64
		var sum sql.NullString
		q := "SELECT COUNT(*), BIT_XOR(CRC32(CONCAT_WS('#', " + strings.Join(cols, ", ") + "))) FROM " + dbutil.Table(schema, tb) + where
		if err := db.QueryRow(q, args...).Scan(&n, &sum); err != nil {
			t.Fatalf("checksum %s.%s: %v", schema, tb, err)
		}
		out[tb] = fmt.Sprintf("%d/%s", n, sum.String)
	}
	return out
}

func planFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	return names
}

func readAll(t *testing.T, paths ...string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err == nil {
			b.Write(data)
		}
	}
	return b.String()
}

// fleetSums is, per sharded table, the row count and XOR checksum over every
// shard in the shard map together, leaving out employees keys in the load's
// groups (NAME=LO-HI). Moving rows between shards does not change it.
func (c *cluster) fleetSums(groups []string) map[string]string {
	c.t.Helper()
	m, err := c.store.Load(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	var skip []string
	var skipArgs []any
	for _, g := range groups {
		var lo, hi int64
		if _, err := fmt.Sscanf(g[strings.IndexByte(g, '=')+1:], "%d-%d", &lo, &hi); err != nil {
			c.t.Fatalf("group %q: %v", g, err)
		}
		skip = append(skip, "emp_no NOT BETWEEN ? AND ?")
		skipArgs = append(skipArgs, lo, hi-1)
	}
	count := map[string]int64{}
	sum := map[string]uint64{}
	for _, l := range m.Locations {
		db := c.env.DB(c.t, c.serverIndex(l.Addr().String()), "")
		for _, tb := range sandbox.ShardedTables {
			rows, err := db.Query("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", l.Schema, tb)
			if err != nil {
				c.t.Fatal(err)
			}
			var cols []string
			for rows.Next() {
				var col string
				rows.Scan(&col)
				cols = append(cols, "COALESCE("+dbutil.QuoteIdent(col)+", '<null>')")
			}
			rows.Close()
			if len(cols) == 0 {
				continue // an emptied, dropped shard
			}
			where, args := "", []any(nil)
			if tb == "employees" && len(skip) > 0 {
				where, args = " WHERE "+strings.Join(skip, " AND "), skipArgs
			}
			var n int64
			var x uint64
			q := "SELECT COUNT(*), COALESCE(BIT_XOR(CAST(CONV(SUBSTRING(SHA2(CONCAT_WS('#', " + strings.Join(cols, ", ") + "), 256), 1, 16), 16, 10) AS UNSIGNED)), 0) FROM " + dbutil.Table(l.Schema, tb) + where
			if err := db.QueryRow(q, args...).Scan(&n, &x); err != nil {
				c.t.Fatalf("checksum %s.%s: %v", l.Schema, tb, err)
			}
			count[tb] += n
			sum[tb] ^= x
		}
	}
	out := map[string]string{}
	for tb := range count {
		out[tb] = fmt.Sprintf("%d/%x", count[tb], sum[tb])
	}
	return out
}

// likePrefix is name for a LIKE pattern, its "_" literal: a test that drops
// another's schemas (as a pattern, e2e_keys1_1 matches e2e_keys1x1) would break the
// tests that run in parallel.
func likePrefix(name string) string { return strings.ReplaceAll(name, "_", "\\_") }
