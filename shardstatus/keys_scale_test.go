package shardstatus

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// The cost of per-key counts at scale, reported (never asserted): one LIST
// shard of SHARDCTL_KEYS_SCALE_ROWS rows (e.g. 10000000) in one table keyed
// (tenant, id), 128 rows per tenant. It times Top (every key of the shard,
// GROUP BY in chunks of 1,000 keys) and Keys (an index read per key).
// Skipped unless the variable is set: seeding takes minutes.
func TestKeyCountsAtScale(t *testing.T) {
	rows, _ := strconv.Atoi(os.Getenv("SHARDCTL_KEYS_SCALE_ROWS"))
	if rows <= 0 {
		t.Skip("set SHARDCTL_KEYS_SCALE_ROWS=10000000 to measure")
	}
	env := testenv.Get(t)
	ctx := context.Background()
	db := env.DB(t, 1, "")
	const perTenant = 128
	tenants := rows / perTenant
	start := time.Now()
	testenv.Schema(t, db, "status_keys_scale", "CREATE TABLE orders (tenant INT NOT NULL, id INT NOT NULL, PRIMARY KEY (tenant, id))")
	for lo := 1; lo <= tenants; lo += 5000 {
		var vals []string
		for k := lo; k < lo+5000 && k <= tenants; k++ {
			vals = append(vals, fmt.Sprintf("(%d, 0)", k))
		}
		testenv.Exec(t, db, "INSERT INTO status_keys_scale.orders VALUES "+strings.Join(vals, ","))
	}
	for n := 1; n < perTenant; n *= 2 {
		testenv.Exec(t, db, fmt.Sprintf("INSERT INTO status_keys_scale.orders SELECT tenant, id + %d FROM status_keys_scale.orders", n))
	}
	t.Logf("seeded %d rows (%d tenants) in %s", tenants*perTenant, tenants, time.Since(start).Round(time.Second))
	addr := env.Addr(1)
	m := &shardmap.Map{
		Functions: []shardmap.Function{{ID: 1, Name: "tenants", Type: shardmap.List, KeyType: keyspace.IntKey}},
		Columns:   []shardmap.Column{{Table: "orders", Column: "tenant", FuncID: 1}},
		Locations: []shardmap.Location{{ShardID: 1, Host: addr.Host, Port: addr.Port, Schema: "status_keys_scale"}},
	}
	for k := 1; k <= tenants; k++ {
		p := keyspace.IntK(int64(k))
		m.Mappings = append(m.Mappings, shardmap.Mapping{FuncID: 1, Kind: shardmap.List, Point: &p, ShardID: 1, Status: shardmap.Online})
	}
	start = time.Now()
	top, err := Top(ctx, m, 10, sandbox.Creds())
	if err != nil || len(top) != 10 || top[0].Rows != perTenant {
		t.Fatalf("top: %v %+v", err, top)
	}
	t.Logf("Top 10 over %d rows, %d keys: %s", tenants*perTenant, tenants, time.Since(start).Round(time.Millisecond))
	keys := []string{"1", fmt.Sprint(tenants / 2), fmt.Sprint(tenants)}
	start = time.Now()
	got, err := Keys(ctx, m, m.Functions[0], keys, sandbox.Creds())
	if err != nil || len(got) != 3 || got[2].Rows != perTenant {
		t.Fatalf("keys: %v %+v", err, got)
	}
	t.Logf("Keys %v: %s", keys, time.Since(start).Round(time.Millisecond))
}
