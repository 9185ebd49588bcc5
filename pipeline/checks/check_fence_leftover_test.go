package checks

import (
	"context"
	"testing"
	"time"

	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
)

// Fence triggers another operation left on the source refuse a new one;
// once they are gone it is accepted.
func TestCheckFenceLeftover(t *testing.T) {
	_, c := checkEnv(t, "move", "chk_fence", "CREATE TABLE t (id INT PRIMARY KEY)")
	src := c.Src
	if err := runCheck(t, "no other operation's fence", c); err != nil {
		t.Fatalf("no fence: %v", err)
	}
	ctx := context.Background()
	if err := fence.Install(ctx, src, "chk_fence", []fence.Table{{Name: "t"}}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	checktest.WantRefused(t, runCheck(t, "no other operation's fence", c), "carries fence triggers from another operation")
	if err := fence.Remove(ctx, src, "chk_fence", []string{"t"}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := runCheck(t, "no other operation's fence", c); err != nil {
		t.Fatalf("the fence lifted: %v", err)
	}
}
