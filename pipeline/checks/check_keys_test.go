package checks

import (
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
)

// A table without a key to identify its rows by is refused before anything
// is written; with a primary key it is accepted.
func TestCheckRowKeys(t *testing.T) {
	env, c := checkEnv(t, "move", "chk_keys", "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
	if err := runCheck(t, "row keys", c); err != nil {
		t.Fatalf("a primary key: %v", err)
	}
	testenv.InSchema(t, c.Src, "chk_keys", "CREATE TABLE heap (a INT NULL, v INT)")
	c.Plan = checktest.Plan(t, env, "move", "chk_keys", "chk_keys")
	checktest.WantRefused(t, runCheck(t, "row keys", c), "table chk_keys.heap has no primary key")
}
