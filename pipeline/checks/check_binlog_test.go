package checks

import (
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
)

// A source that logs row images without every column is refused; with
// FULL images it is accepted.
func TestCheckBinlogSettings(t *testing.T) {
	_, c := checkEnv(t, "move", "chk_binlog", "CREATE TABLE t (id INT PRIMARY KEY)")
	if err := runCheck(t, "binlog settings", c); err != nil {
		t.Fatalf("a ROW, FULL source: %v", err)
	}
	testenv.SetGlobal(t, c.Src, "binlog_row_image", "MINIMAL")
	checktest.WantRefused(t, runCheck(t, "binlog settings", c), "binlog_row_image=MINIMAL: set it to FULL")
}
