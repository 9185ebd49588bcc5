package checks

import (
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
)

// A foreign key that reaches into another schema is refused by its shape;
// one inside the shard's schema is accepted. (The split's check on the
// rows is exercised end to end: TestSplitChecksForeignKeysOnTheRows.)
func TestCheckForeignKeys(t *testing.T) {
	env, c := checkEnv(t, "move", "chk_fk", "CREATE TABLE parent (id INT PRIMARY KEY)",
		"CREATE TABLE child (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES parent (id))")
	src := c.Src
	testenv.Schema(t, src, "chk_fk_other", "CREATE TABLE ref (id INT PRIMARY KEY)")
	if err := runCheck(t, "foreign keys", c); err != nil {
		t.Fatalf("keys inside the schema: %v", err)
	}
	testenv.InSchema(t, src, "chk_fk", "CREATE TABLE outside (id INT PRIMARY KEY, r INT, FOREIGN KEY (r) REFERENCES chk_fk_other.ref (id))")
	c.Plan = checktest.Plan(t, env, "move", "chk_fk", "chk_fk")
	checktest.WantRefused(t, runCheck(t, "foreign keys", c), "chk_fk_other")
	// Not a planning run: the split's row check is left to the verify step.
	c.Plan.Operation = "split"
	if err := runCheck(t, "foreign keys on the rows", c); err != nil {
		t.Fatalf("the row check outside planning: %v", err)
	}
}
