package checks

import (
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
)

// A reverse window needs the target to be a binlog source with full row
// images: a target logging MINIMAL images is refused, a ROW/FULL one
// accepted; a plan without a window needs nothing of it.
func TestCheckReverseWindow(t *testing.T) {
	_, c := checkEnv(t, "move", "chk_win", "CREATE TABLE t (id INT PRIMARY KEY)")
	dst, p := c.Dst, c.Plan
	testenv.SetGlobal(t, dst, "binlog_row_image", "MINIMAL")
	if err := runCheck(t, "reverse window", c); err != nil {
		t.Fatalf("no window: %v", err)
	}
	p.Options.ReverseWindowS = 60
	checktest.WantRefused(t, runCheck(t, "reverse window", c), "binlog_row_image=MINIMAL: set ROW and FULL")
	testenv.Exec(t, dst, "SET GLOBAL binlog_row_image = 'FULL'")
	if err := runCheck(t, "reverse window", c); err != nil {
		t.Fatalf("a ROW, FULL target: %v", err)
	}
}
