package pipeline

import (
	"testing"

	"github.com/shardctl/shardctl/internal/testenv"
)

// A source that logs row images without every column is refused; with
// FULL images it is accepted.
func TestCheckBinlogSettings(t *testing.T) {
	env := testenv.Get(t)
	src := env.DB(t, 1, "")
	testenv.Schema(t, src, "chk_binlog", "CREATE TABLE t (id INT PRIMARY KEY)")
	c := &CheckEnv{Src: src, Dst: env.DB(t, 2, ""), Plan: checkPlan(t, env, "move", "chk_binlog", "chk_binlog")}
	if err := runCheck(t, "binlog settings", c); err != nil {
		t.Fatalf("a ROW, FULL source: %v", err)
	}
	setGlobal(t, src, "binlog_row_image", "MINIMAL")
	wantRefused(t, runCheck(t, "binlog settings", c), "binlog_row_image=MINIMAL: set it to FULL")
}
