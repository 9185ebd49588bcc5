package load

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/router"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture seeds two range shards (load_1 on server 1 for keys below
// 1,000,000 and load_2 on server 2 above) and returns a router over them.
// Each test writes its own key ranges, so tests never see each other's keys.
type fixture struct {
	env    *testenv.Env
	store  *shardmap.Store
	router *router.Router
	shards []sandbox.SeededShard
}

func setup(t *testing.T) *fixture {
	t.Helper()
	env := testenv.Get(t)
	ctx := context.Background()
	store := shardmap.New(env.DB(t, 1, ""), "load_map")
	shards, err := sandbox.Seed(ctx, store, sandbox.SeedConfig{
		Servers: []dbutil.Addr{env.Addr(1), env.Addr(2)}, Creds: sandbox.Creds(),
		Shards: 2, Employees: 2000, SchemaPrefix: "load_",
	})
	if err != nil {
		t.Fatal(err)
	}
	// A short TTL so the router sees a status change within a few ms.
	r := router.New(store, router.Options{Creds: sandbox.Creds(), TTL: 20 * time.Millisecond})
	t.Cleanup(r.Close)
	return &fixture{env: env, store: store, router: r, shards: shards}
}

func (f *fixture) check(t *testing.T, ledger string) CheckReport {
	t.Helper()
	rep, err := Check(context.Background(), f.store, sandbox.Creds(), ledger)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("check: %s", rep)
	return rep
}

func TestLoadOverTwoShardsChecksClean(t *testing.T) {
	f := setup(t)
	ledger := t.TempDir() + "/ledger.jsonl"
	progress := 0
	st, err := Run(context.Background(), Config{
		Router: f.router,
		Groups: []Group{{"s1", 1, 2001}, {"s2", 1_000_001, 1_002_001}},
		Rate:   200, Duration: 3 * time.Second, Ledger: ledger, Seed: 1,
		Progress: func(Stats) { progress++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run: %s", st)
	if st.Acked < 300 || st.Acked > 650 || st.Errors != 0 {
		t.Fatalf("%d acked (want about 600), %d errors (last: %s)", st.Acked, st.Errors, st.LastError)
	}
	for name, g := range st.Groups {
		if g.Acked < 100 || g.Errors != 0 || g.Retries != 0 {
			t.Fatalf("group %s: %+v", name, g)
		}
	}
	if progress < 1 {
		t.Fatal("progress was never reported")
	}
	entries, err := ReadLedger(ledger)
	if err != nil || int64(len(entries)) != st.Acked {
		t.Fatalf("ledger has %d entries for %d acks: %v", len(entries), st.Acked, err)
	}
	rep := f.check(t, ledger)
	if !rep.OK() {
		t.Fatalf("problems: %v", rep.Problems)
	}
	if rep.Present+rep.Absent != rep.Keys || rep.PerShard[f.shards[0].ShardID] == 0 || rep.PerShard[f.shards[1].ShardID] == 0 {
		t.Fatalf("report: %+v", rep)
	}
}

func TestOfflineMappingShowsAsRetriesAndAGap(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	m, err := f.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fn, _, _ := m.TableFunction(Table)
	res, err := m.Lookup(fn, "3001")
	if err != nil {
		t.Fatal(err)
	}
	set := func(status string) error {
		return f.store.Apply(ctx, "test "+status, []shardmap.Change{{Op: shardmap.OpSetStatus, Ref: res.Mapping.Ref(), Status: status}})
	}
	t.Cleanup(func() { _ = set(shardmap.Online) })

	ledger := t.TempDir() + "/ledger.jsonl"
	type result struct {
		st  Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := Run(ctx, Config{
			Router: f.router,
			Groups: []Group{{"moving", 3001, 5001}, {"staying", 1_003_001, 1_005_001}},
			Rate:   200, Duration: 3 * time.Second, Ledger: ledger, Seed: 2,
		})
		done <- result{st, err}
	}()
	time.Sleep(time.Second)
	if err := set(shardmap.Offline); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := set(shardmap.Online); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("run: %s", r.st)
	mv, stay := r.st.Groups["moving"], r.st.Groups["staying"]
	if mv.Retries == 0 || mv.Errors != 0 || mv.LongestGap < 400*time.Millisecond {
		t.Fatalf("moving group: %+v; want retries, no errors and a gap of about 500ms", mv)
	}
	if stay.Retries != 0 || stay.Errors != 0 || stay.Acked == 0 {
		t.Fatalf("staying group: %+v; want no retries and no errors", stay)
	}
	if rep := f.check(t, ledger); !rep.OK() {
		t.Fatalf("problems: %v", rep.Problems)
	}
}

func TestCheckFindsTampering(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ledger := t.TempDir() + "/ledger.jsonl"
	st, err := Run(ctx, Config{
		Router: f.router,
		Groups: []Group{{"t1", 6001, 6401}, {"t2", 1_006_001, 1_006_401}},
		Rate:   400, Duration: 2 * time.Second, Ledger: ledger, Seed: 3,
	})
	if err != nil || st.Errors != 0 {
		t.Fatalf("run: %s, %v", st, err)
	}
	if rep := f.check(t, ledger); !rep.OK() {
		t.Fatalf("problems before tampering: %v", rep.Problems)
	}
	entries, err := ReadLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	want := Fold(entries)
	// Pick keys by their final state: present keys on each shard and one deleted key.
	var present1, present2 []int64
	var deleted int64 = -1
	for k, x := range want {
		switch {
		case len(x.Allowed) != 1 || x.Unknown:
		case x.Allowed[0].Present && k < 1_000_000:
			present1 = append(present1, k)
		case x.Allowed[0].Present:
			present2 = append(present2, k)
		case k < 1_000_000:
			deleted = k
		}
	}
	if len(present1) < 2 || len(present2) < 1 || deleted < 0 {
		t.Fatalf("not enough keys to tamper with: %d/%d present, deleted %d", len(present1), len(present2), deleted)
	}
	s1, s2 := f.env.DB(t, 1, ""), f.env.DB(t, 2, "")
	t1, t2 := dbutil.Table("load_1", Table), dbutil.Table("load_2", Table)
	must := func(n int64, err error) {
		t.Helper()
		if err != nil || n != 1 {
			t.Fatalf("tamper: %d rows, %v", n, err)
		}
	}

	lost, copied, changed := present1[0], present1[1], present2[0]
	res, err := s1.ExecContext(ctx, "DELETE FROM "+t1+" WHERE emp_no = ?", lost)
	must(rows(res, err))
	var bd, fn, ln, g, hd string
	if err := s1.QueryRowContext(ctx, "SELECT birth_date, first_name, last_name, gender, hire_date FROM "+t1+" WHERE emp_no = ?", copied).Scan(&bd, &fn, &ln, &g, &hd); err != nil {
		t.Fatal(err)
	}
	res, err = s2.ExecContext(ctx, "INSERT INTO "+t2+" (emp_no, birth_date, first_name, last_name, gender, hire_date) VALUES (?, ?, ?, ?, ?, ?)", copied, bd, fn, ln, g, hd)
	must(rows(res, err))
	t.Cleanup(func() { _, _ = s2.ExecContext(context.Background(), "DELETE FROM "+t2+" WHERE emp_no = ?", copied) })
	res, err = s2.ExecContext(ctx, "UPDATE "+t2+" SET last_name = 'tampered' WHERE emp_no = ?", changed)
	must(rows(res, err))
	res, err = s1.ExecContext(ctx, "INSERT INTO "+t1+" (emp_no, birth_date, first_name, last_name, gender, hire_date) VALUES (?, '1960-01-01', 'x', 'revenant', 'M', '1990-01-01')", deleted)
	must(rows(res, err))

	rep := f.check(t, ledger)
	for _, p := range rep.Problems {
		t.Log(p)
	}
	expect := []string{
		fmt.Sprintf("key %d missing at its shard %d", lost, f.shards[0].ShardID),
		fmt.Sprintf("key %d present on another shard: found on shard %d (%s/load_2)", copied, f.shards[1].ShardID, f.env.Addr(2)),
		fmt.Sprintf("but it belongs to shard %d (%s/load_1)", f.shards[0].ShardID, f.env.Addr(1)),
		fmt.Sprintf("key %d wrong value at its shard %d", changed, f.shards[1].ShardID),
		fmt.Sprintf("key %d present at its shard %d", deleted, f.shards[0].ShardID),
	}
	all := strings.Join(rep.Problems, "\n")
	for _, e := range expect {
		if !strings.Contains(all, e) {
			t.Errorf("no problem says %q", e)
		}
	}
	if len(rep.Problems) != 4 {
		t.Fatalf("%d problems, want 4", len(rep.Problems))
	}
}

func rows(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func TestCheckToleratesOnlyAnEmptiedUnmappedLocation(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	ledger := t.TempDir() + "/ledger.jsonl"
	if _, err := Run(ctx, Config{Router: f.router, Groups: []Group{{"e", 7001, 7201}}, Rate: 200, Duration: time.Second, Ledger: ledger}); err != nil {
		t.Fatal(err)
	}
	a2 := f.env.Addr(2)
	gone, err := f.store.AddShard(ctx, a2.Host, a2.Port, "load_gone")
	if err != nil {
		t.Fatal(err)
	}
	const lower = 2_000_000_000
	var mapped int
	t.Cleanup(func() {
		ctx := context.Background()
		m, err := f.store.Load(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		fn, _ := m.Function("employees")
		k, _ := m.Lookup(fn, fmt.Sprint(lower))
		changes := []shardmap.Change{{Op: shardmap.OpRemoveLocation, ShardID: gone}}
		if mapped != 0 {
			changes = []shardmap.Change{{Op: shardmap.OpRemoveMapping, Ref: k.Mapping.Ref()}, {Op: shardmap.OpRemoveLocation, ShardID: mapped}, changes[0]}
		}
		if err := f.store.Apply(ctx, "test cleanup", changes); err != nil {
			t.Error(err)
		}
	})
	rep := f.check(t, ledger)
	if !rep.OK() || !strings.Contains(strings.Join(rep.Notes, "\n"), "load_gone) has no mappings and no employees table: holds nothing") {
		t.Fatalf("an unmapped dropped schema: problems %v, notes %v", rep.Problems, rep.Notes)
	}

	if mapped, err = f.store.AddShard(ctx, a2.Host, a2.Port, "load_gone_mapped"); err != nil {
		t.Fatal(err)
	}
	if err := f.store.AddRange(ctx, "employees", fmt.Sprint(lower), mapped); err != nil {
		t.Fatal(err)
	}
	rep = f.check(t, ledger)
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], fmt.Sprintf("shard %d (%s/load_gone_mapped) cannot be read", mapped, a2)) {
		t.Fatalf("a mapped unreadable schema: problems %v", rep.Problems)
	}
}

func TestKilledConnectionsLeaveACheckableLedger(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ledger := t.TempDir() + "/ledger.jsonl"
	// Kill the load's connections to shard 2's server (the shard map is on
	// server 1) again and again: some statements die in flight.
	killer := f.env.DB(t, 2, "")
	killed, killerDone := 0, make(chan struct{})
	go func() {
		defer close(killerDone)
		for ctx.Err() == nil {
			rows, err := killer.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE user = ? AND id <> CONNECTION_ID() AND command = 'Query'", sandbox.Creds().User)
			if err != nil {
				continue
			}
			var ids []int64
			for rows.Next() {
				var id int64
				if rows.Scan(&id) == nil {
					ids = append(ids, id)
				}
			}
			rows.Close()
			for _, id := range ids {
				if _, err := killer.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
					killed++
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	st, err := Run(ctx, Config{Router: f.router, Groups: []Group{{"k", 1_008_001, 1_008_201}}, Concurrency: 4, Duration: 2 * time.Second, Ledger: ledger})
	cancel()
	<-killerDone
	if err != nil {
		t.Fatal(err)
	}
	g := st.Groups["k"]
	t.Logf("run: %s; ambiguous %d; killed %d; last error %s", st, g.Ambiguous, killed, st.LastError)
	entries, err := ReadLedger(ledger)
	if err != nil || int64(len(entries)) != st.Acked+g.Ambiguous {
		t.Fatalf("ledger has %d entries for %d acks and %d ambiguous writes: %v", len(entries), st.Acked, g.Ambiguous, err)
	}
	// The router retries a write whose connection died mid-statement (the
	// upsert is idempotent); what it cannot retry is logged ambiguous. Either
	// way the killed statements must show up.
	if killed >= 20 && g.Ambiguous == 0 && g.Retries == 0 {
		t.Fatalf("%d connections killed mid-statement yet no write was retried or logged ambiguous", killed)
	}
	if rep := f.check(t, ledger); !rep.OK() {
		t.Fatalf("problems: %v", rep.Problems)
	}
}
