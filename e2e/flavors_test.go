package e2e

import (
	"os"
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
)

// TestMoveAcrossFlavors: a shard moves to the other flavor's server and back
// (MariaDB → MySQL → MariaDB on the MariaDB pass, the reverse on the MySQL
// pass) under the ledger load, each move killed once and resumed; every
// acknowledged write ends at its key's shard, and the rows the load does not
// touch are the same as before.
func TestMoveAcrossFlavors(t *testing.T) {
	other := testenv.OtherFlavor(t)
	const seeded = 1500
	c := newCluster(t, "e2e_xflavor", []int{1, 1}, []int{seeded, 300})
	schema := c.shards[0].Schema
	before := tableSums(t, c.db(1), schema, c.untouchedBelow(1, seeded))
	lp := c.startLoad(200, c.keys("moving", 1, seeded), c.keys("staying", 2, 300))
	c.killThenResume("after:copy", []string{"move", "--shard", "1", "--to", other.Addr(1).String(), "--yes", "--chunk-rows", "500"})
	odb := openAt(t, other.Addr(1))
	if got := tableSums(t, odb, schema, c.untouchedBelow(1, seeded)); !sameSums(before, got) {
		t.Errorf("on the %s server the rows differ: before %v, after %v", testenv.OtherFlavorName(), before, got)
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
		t.Errorf("back on %s the rows differ: before %v, after %v", testenv.Flavor(), before, got)
	}
	if schemaExists(t, odb, schema) {
		t.Errorf("the %s server still has %s after the move back", testenv.OtherFlavorName(), schema)
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
