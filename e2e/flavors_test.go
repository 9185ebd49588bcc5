package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
)

// TestMixedFlavorsRefused: a move between MariaDB and MySQL is refused by
// preflight (exit 2), changing nothing. It starts one server of the other
// flavor next to the shared sandbox.
func TestMixedFlavorsRefused(t *testing.T) {
	other := sandbox.FlavorMySQL
	if testenv.MySQL() {
		other = sandbox.FlavorMariaDB
	}
	if other == sandbox.FlavorMySQL && sandbox.MySQLRootReady() != nil || other == sandbox.FlavorMariaDB && !haveMariaDB() {
		if os.Getenv("CI") != "" {
			t.Fatalf("no %s server to pair with (CI is set, so this is a failure)", other)
		}
		t.Skipf("no %s server to pair with", other)
	}
	port, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	sb := sandbox.Config{Dir: t.TempDir(), Servers: 1, BasePort: port, Flavor: other, ServerIDBase: 30, DieWithParent: true}
	upCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	srv, err := sandbox.Up(upCtx, sb)
	cancel()
	t.Cleanup(func() { _ = sandbox.Down(context.Background(), sb, true) })
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, "e2e_mixed", []int{2}, []int{100})
	r := c.run(nil, "move", "--shard", "1", "--to", srv[0].Addr().String(), "--yes")
	if r.code != 2 || !strings.Contains(r.stderr, "between MariaDB and MySQL is not supported") {
		t.Fatalf("a %s -> %s move: exit %d, want 2 with a clear refusal\n%s", testenv.Flavor(), other, r.code, r.stderr)
	}
	if schemaExists(t, openAt(t, srv[0].Addr()), c.shards[0].Schema) {
		t.Error("the refused move created the target schema")
	}
	t.Logf("refused: %s", strings.TrimSpace(r.stderr))
}

func haveMariaDB() bool {
	_, err := sandbox.Binary("mariadbd")
	return err == nil
}
