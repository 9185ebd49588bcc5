package shardstatus

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
	"github.com/shardctl/shardctl/shardmap"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ReadAll reads a server's shards together: each shard gets its own
// figures (its sharded tables' rows, its whole size), in the order asked, on
// every server at once; a server that does not answer makes its shards
// unreachable and no other.
func TestReadAllPerServer(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	m := &shardmap.Map{Columns: []shardmap.Column{{Table: "s", Column: "k"}}}
	want := map[int]int64{}
	for i := 0; i < 6; i++ {
		server := 1 + i%2
		schema := fmt.Sprintf("status_all_%d", i)
		db := env.DB(t, server, "")
		testenv.Schema(t, db, schema, "CREATE TABLE s (k INT PRIMARY KEY)", "CREATE TABLE g (id INT PRIMARY KEY)",
			fmt.Sprintf("INSERT INTO s SELECT seq FROM seq_1_to_%d", 10*(i+1)), "INSERT INTO g VALUES (1), (2), (3)")
		addr := env.Addr(server)
		m.Locations = append(m.Locations, shardmap.Location{ShardID: 10 + i, Host: addr.Host, Port: addr.Port, Schema: schema})
		want[10+i] = int64(10 * (i + 1))
	}
	free, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	m.Locations = append(m.Locations, shardmap.Location{ShardID: 99, Host: "127.0.0.1", Port: free, Schema: "nowhere"})
	got := ReadAll(ctx, m, m.Locations, sandbox.Creds(), true)
	if len(got) != len(m.Locations) {
		t.Fatalf("%d shards read, %d asked", len(got), len(m.Locations))
	}
	for i, st := range got {
		if st.ShardID != m.Locations[i].ShardID {
			t.Fatalf("shard %d read at place %d of %d", st.ShardID, i, m.Locations[i].ShardID)
		}
		if st.ShardID == 99 {
			if st.Reachable || st.Error != "unreachable" {
				t.Errorf("a shard on a server that does not answer: %+v", st)
			}
			continue
		}
		if !st.Reachable || st.Error != "" || st.Rows != want[st.ShardID] || st.RowsKind != Exact || st.Bytes <= 0 {
			t.Errorf("shard %d: %+v, want %d rows counted", st.ShardID, st, want[st.ShardID])
		}
	}
	// Estimates come from the same one query per server.
	for _, st := range ReadAll(ctx, m, m.Locations[:6], sandbox.Creds(), false) {
		if !st.Reachable || st.RowsKind != Estimate || st.Bytes <= 0 {
			t.Errorf("shard %d without --exact: %+v", st.ShardID, st)
		}
	}
}
