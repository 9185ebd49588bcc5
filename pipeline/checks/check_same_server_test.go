package checks

import (
	"testing"

	"github.com/shardctl/shardctl/pipeline/checks/checktest"
)

// A target that is the source's own schema on the same server is refused;
// the same schema name on another server is accepted.
func TestCheckTargetIsNotTheSource(t *testing.T) {
	env, c := checkEnv(t, "move", "chk_same", "CREATE TABLE t (id INT PRIMARY KEY)")
	p := c.Plan
	if err := runCheck(t, "target is not the source", c); err != nil {
		t.Fatalf("another server: %v", err)
	}
	c.Dst = env.DB(t, 1, "")
	p.Target.Host, p.Target.Port = env.Addr(1).Host, env.Addr(1).Port
	checktest.WantRefused(t, runCheck(t, "target is not the source", c), "is the source server itself")
}
