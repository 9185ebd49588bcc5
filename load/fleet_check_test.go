package load

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/router"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// comSelect is the server's count of SELECT statements so far.
func comSelect(t *testing.T, env *testenv.Env, i int) int64 {
	t.Helper()
	var name string
	var n int64
	if err := env.DB(t, i, "").QueryRow("SHOW GLOBAL STATUS LIKE 'Com_select'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Check reads a fleet per server, not per shard: 30 shards on one server
// cost a handful of statements (it was two per shard: the keys, then the
// fence triggers), and it still finds what it found place by place: a key
// copied to another shard, a mapped shard whose table is gone, a key in a
// fenced copy (tolerated, noted).
func TestCheckReadsAFleetPerServer(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	const shards = 30
	store := shardmap.New(env.DB(t, 1, ""), "load_fleet_map")
	seeded, err := sandbox.Seed(ctx, store, sandbox.SeedConfig{
		Servers: []dbutil.Addr{env.Addr(2)}, Creds: sandbox.Creds(),
		Shards: shards, Employees: 0, RangeWidth: 1000, SchemaPrefix: "loadfleet_",
	})
	t.Cleanup(func() {
		testenv.Exec(t, env.DB(t, 1, ""), "DROP DATABASE IF EXISTS load_fleet_map")
		for _, sh := range seeded {
			testenv.Exec(t, env.DB(t, 2, ""), "DROP DATABASE IF EXISTS "+dbutil.QuoteIdent(sh.Schema))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	r := router.New(store, router.Options{Creds: sandbox.Creds(), TTL: 20 * time.Millisecond})
	t.Cleanup(r.Close)
	ledger := t.TempDir() + "/ledger.jsonl"
	// keys in shards 1 to 3 (each owns 1,000 keys)
	if st, err := Run(ctx, Config{Router: r, Groups: []Group{{"f", 1, 3000}}, Rate: 300, Duration: time.Second, Ledger: ledger, Mix: Mix{Insert: 100}}); err != nil || st.Errors != 0 || st.Acked == 0 {
		t.Fatalf("run: %s, %v", st, err)
	}

	before := comSelect(t, env, 2)
	rep, err := Check(ctx, store, sandbox.Creds(), ledger)
	if err != nil {
		t.Fatal(err)
	}
	n := comSelect(t, env, 2) - before
	t.Logf("check: %s; %d SELECT statements on the fleet's server", rep, n)
	if !rep.OK() || rep.Present != rep.Keys || rep.Keys == 0 {
		t.Fatalf("a clean ledger: %s %v", rep, rep.Problems)
	}
	if n >= shards {
		t.Errorf("checking %d shards on one server took %d SELECT statements: one or more per shard", shards, n)
	}

	// A copied key, a key in a fenced copy and a mapped shard without its table, each far from the keys' shards.
	entries, err := ReadLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	var keys []int64
	for k, x := range Fold(entries) {
		if len(x.Allowed) == 1 && x.Allowed[0].Present {
			keys = append(keys, k)
		}
	}
	if len(keys) < 2 {
		t.Fatalf("only %d keys present", len(keys))
	}
	db := env.DB(t, 2, "")
	copyTo := func(k int64, schema string) {
		t.Helper()
		testenv.Exec(t, db, "INSERT INTO "+dbutil.Table(schema, Table)+" SELECT * FROM "+dbutil.Table(seeded[k/1000].Schema, Table)+" WHERE emp_no = ?", k)
	}
	copied, fenced, gone := seeded[20].Schema, seeded[25].Schema, seeded[28]
	copyTo(keys[0], copied)
	copyTo(keys[1], fenced)
	testenv.Exec(t, db, "CREATE TRIGGER "+dbutil.Table(fenced, "shardctl_fence_test_bi")+" BEFORE INSERT ON "+dbutil.Table(fenced, Table)+" FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'fenced'")
	testenv.Exec(t, db, "DROP TABLE "+dbutil.Table(gone.Schema, Table))

	rep, err = Check(ctx, store, sandbox.Creds(), ledger)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("check: %s %v %v", rep, rep.Problems, rep.Notes)
	all := strings.Join(rep.Problems, "\n")
	for _, want := range []string{
		fmt.Sprintf("key %d present on another shard: found on shard %d (%s/%s)", keys[0], seeded[20].ShardID, env.Addr(2), copied),
		fmt.Sprintf("shard %d (%s/%s) cannot be read", gone.ShardID, env.Addr(2), gone.Schema),
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no problem says %q", want)
		}
	}
	if len(rep.Problems) != 2 {
		t.Errorf("%d problems, want 2 (the key in the fenced copy is not one)", len(rep.Problems))
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "1 keys also in a fenced copy") {
		t.Errorf("notes %v: no key in a fenced copy", rep.Notes)
	}
}

// A fleet with a second partition function (HASH) whose shards hold other
// tables: the check reads only the shards of the ledger table's function
// (and shards with no mappings), so the other function's shards, which
// have no employees table, are neither read nor a problem.
func TestCheckIgnoresAnotherFunctionsShards(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	store := shardmap.New(env.DB(t, 1, ""), "load_twofn_map")
	other := "load_twofn_orders"
	t.Cleanup(func() {
		testenv.Exec(t, env.DB(t, 1, ""), "DROP DATABASE IF EXISTS load_twofn_map")
		testenv.Exec(t, env.DB(t, 2, ""), "DROP DATABASE IF EXISTS "+dbutil.QuoteIdent(other))
	})
	seeded, err := sandbox.Seed(ctx, store, sandbox.SeedConfig{
		Servers: []dbutil.Addr{env.Addr(2)}, Creds: sandbox.Creds(),
		Shards: 2, Employees: 0, RangeWidth: 1000, SchemaPrefix: "load_twofn_",
	})
	t.Cleanup(func() {
		for _, sh := range seeded {
			testenv.Exec(t, env.DB(t, 2, ""), "DROP DATABASE IF EXISTS "+dbutil.QuoteIdent(sh.Schema))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, env.DB(t, 2, ""), "CREATE DATABASE "+dbutil.QuoteIdent(other))
	testenv.Exec(t, env.DB(t, 2, ""), "CREATE TABLE "+dbutil.Table(other, "orders")+" (order_id INT PRIMARY KEY)")
	if _, err := store.AddFunction(ctx, "orders", shardmap.Hash, keyspace.IntKey); err != nil {
		t.Fatal(err)
	}
	if err := store.AddColumn(ctx, "orders", "order_id", "orders"); err != nil {
		t.Fatal(err)
	}
	id, err := store.AddShard(ctx, env.Addr(2).Host, env.Addr(2).Port, other)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.AddHashPoint(ctx, "orders", strings.Repeat("0", 32), id); err != nil {
		t.Fatal(err)
	}

	r := router.New(store, router.Options{Creds: sandbox.Creds(), TTL: 20 * time.Millisecond})
	t.Cleanup(r.Close)
	ledger := t.TempDir() + "/ledger.jsonl"
	if st, err := Run(ctx, Config{Router: r, Groups: []Group{{"f", 1, 2000}}, Rate: 200, Duration: time.Second, Ledger: ledger, Mix: Mix{Insert: 100}}); err != nil || st.Errors != 0 || st.Acked == 0 {
		t.Fatalf("run: %s, %v", st, err)
	}
	rep, err := Check(ctx, store, sandbox.Creds(), ledger)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("check: %s %v %v", rep, rep.Problems, rep.Notes)
	if !rep.OK() || rep.Present != rep.Keys || rep.Keys == 0 || len(rep.Notes) != 0 {
		t.Fatalf("the ledger holds, yet: %s %v %v", rep, rep.Problems, rep.Notes)
	}
}
