package shardstatus

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/keyspace"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

// Per-key counts of a LIST shard: each owned key's rows summed over the
// function's tables, read in chunks of keys (here 3) through the column's
// index, or in one pass where the column leads no index; rows of a key the
// shard does not own are not counted. Top ranks the fleet's keys, Keys
// counts named keys where the map routes them.
func TestShardKeysAndTop(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	defer func(n int) { groupsPerRead = n }(groupsPerRead)
	groupsPerRead = 3
	m := &shardmap.Map{
		Functions: []shardmap.Function{{ID: 1, Name: "tenants", Type: shardmap.List, KeyType: keyspace.IntKey}},
		Columns:   []shardmap.Column{{Table: "orders", Column: "tenant", FuncID: 1}, {Table: "notes", Column: "tenant", FuncID: 1}},
	}
	want := map[int]map[string]int64{}
	for shard := 1; shard <= 2; shard++ {
		schema := fmt.Sprintf("status_keys_%d", shard)
		db := env.DB(t, shard, "")
		var orders, notes []string
		want[shard] = map[string]int64{}
		for k := 1; k <= 8; k++ {
			key := shard*100 + k
			p := keyspace.IntK(int64(key))
			m.Mappings = append(m.Mappings, shardmap.Mapping{FuncID: 1, Kind: shardmap.List, Point: &p, ShardID: shard, Status: shardmap.Online})
			for i := 0; i < k*shard; i++ {
				orders = append(orders, fmt.Sprintf("(%d, %d)", key, i))
			}
			notes = append(notes, fmt.Sprintf("(%d)", key))
			want[shard][fmt.Sprint(key)] = int64(k*shard + 1)
		}
		orders = append(orders, "(999, 1)", "(999, 2)") // a key this shard does not own
		testenv.Schema(t, db, schema,
			"CREATE TABLE orders (tenant INT NOT NULL, id INT NOT NULL, PRIMARY KEY (tenant, id))",
			"CREATE TABLE notes (id INT AUTO_INCREMENT PRIMARY KEY, tenant INT NOT NULL)", // no index leads with tenant
			"INSERT INTO orders VALUES "+strings.Join(orders, ", "),
			"INSERT INTO notes (tenant) VALUES "+strings.Join(notes, ", "))
		addr := env.Addr(shard)
		m.Locations = append(m.Locations, shardmap.Location{ShardID: shard, Host: addr.Host, Port: addr.Port, Schema: schema})
	}
	for _, l := range m.Locations {
		got, err := ShardKeys(ctx, env.DB(t, l.ShardID, ""), m, m.Functions[0], l, m.ShardMappings(l.ShardID))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want[l.ShardID]) {
			t.Errorf("shard %d keys:\n got %v\nwant %v", l.ShardID, got, want[l.ShardID])
		}
	}
	top, err := Top(ctx, m, 3, sandbox.Creds())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range top {
		got = append(got, fmt.Sprintf("%s:%d@%d", k.Key, k.Rows, k.ShardID))
	}
	if strings.Join(got, " ") != "208:17@2 207:15@2 206:13@2" {
		t.Errorf("top 3: %v", got)
	}
	keys, err := Keys(ctx, m, m.Functions[0], []string{"103", "205"}, sandbox.Creds())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Rows != 4 || keys[0].ShardID != 1 || keys[1].Rows != 11 || keys[1].Server != env.Addr(2).String() {
		t.Errorf("keys 103, 205: %+v", keys)
	}
	if _, err := Keys(ctx, m, m.Functions[0], []string{"4242"}, sandbox.Creds()); err == nil {
		t.Error("a key outside the list was counted")
	}
}
