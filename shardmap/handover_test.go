package shardmap_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// A bound inside the open-ended last range, or a new ring point, hands keys
// over without moving rows: accepted only where the giving shard has none.
func TestHandoverNeedsAnEmptyPart(t *testing.T) {
	env := testenv.Get(t)
	db := env.DB(t, 1, "")
	for _, q := range []string{"DROP DATABASE IF EXISTS sm_ho_data", "CREATE DATABASE sm_ho_data",
		"CREATE TABLE sm_ho_data.employees (emp_no INT PRIMARY KEY)", "INSERT INTO sm_ho_data.employees VALUES (5), (1500)",
		"CREATE TABLE sm_ho_data.ring_t (k INT PRIMARY KEY)", "INSERT INTO sm_ho_data.ring_t VALUES (1), (2), (3), (4), (5), (6), (7), (8)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s := newStore(t, "sm_handover")
	s.Rows = shardmap.ShardRows(sandbox.Creds())
	addr := env.Addr(1)
	a := must[int](t)(s.AddShard(ctx, addr.Host, addr.Port, "sm_ho_data"))
	b := must[int](t)(s.AddShard(ctx, addr.Host, addr.Port, "sm_ho_b"))
	must[int](t)(s.AddFunction(ctx, "emp", shardmap.Range, keyspace.IntKey))
	must[int](t)(s.AddFunction(ctx, "ring", shardmap.Hash, keyspace.IntKey))
	check(t, s.AddColumn(ctx, "employees", "emp_no", "emp"))
	check(t, s.AddColumn(ctx, "ring_t", "k", "ring"))
	check(t, s.AddRange(ctx, "emp", "0", a))
	check(t, s.AddHashPoint(ctx, "ring", "00000000000000000000000000000000", a))
	before := must[*shardmap.Map](t)(s.Load(ctx))

	err := s.AddRange(ctx, "emp", "1000", b)
	if !errors.Is(err, shardmap.ErrBadInput) || !strings.Contains(err.Error(), "[1000, +inf)") || !strings.Contains(err.Error(), "split") {
		t.Fatalf("a bound with rows above it: %v", err)
	}
	err = s.AddHashPoint(ctx, "ring", "80000000000000000000000000000000", b)
	if !errors.Is(err, shardmap.ErrBadInput) || !strings.Contains(err.Error(), "ring_t") {
		t.Fatalf("a ring point taking rows: %v", err)
	}
	if after := must[*shardmap.Map](t)(s.Load(ctx)); !reflect.DeepEqual(before, after) {
		t.Fatal("a refused handover changed the shard map")
	}
	// Nothing at or above 2000: the empty part is handed over.
	check(t, s.AddRange(ctx, "emp", "2000", b))
	for _, mp := range must[*shardmap.Map](t)(s.Load(ctx)).Mappings {
		if mp.Status != shardmap.Online {
			t.Fatalf("after a handover mapping %s is %s", mp, mp.Status)
		}
	}
	// Without a way to look at the shard, a handover is refused.
	blind := shardmap.New(s.DB, s.Schema)
	if err := blind.AddRange(ctx, "emp", "3000", a); !errors.Is(err, shardmap.ErrBadInput) {
		t.Fatalf("a blind handover: %v", err)
	}
	// The same shard extending its own range hands nothing over.
	check(t, blind.AddRange(ctx, "emp", "3000", b))

	// init refuses a data schema and creates nothing in it.
	if err := shardmap.New(db, "sm_ho_data").Init(ctx); !errors.Is(err, shardmap.ErrBadInput) || !strings.Contains(err.Error(), "employees") {
		t.Fatalf("init in a data schema: %v", err)
	}
	var n int
	db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'sm_ho_data'").Scan(&n)
	if n != 2 {
		t.Fatalf("init left %d tables in the data schema", n)
	}
}
