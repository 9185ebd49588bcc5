package e2e

import (
	"strings"
	"testing"
)

// A copy that may outlast the source's binlog retention is warned about at
// preflight (here: --max-rate 5 over some 2,700 rows against a 10-minute
// retention); the same move at full speed is not.
func TestPreflightWarnsOfShortBinlogRetention(t *testing.T) {
	c := newCluster(t, "e2e_retention", []int{2}, []int{300})
	src := c.db(2)
	var old int64
	if err := src.QueryRow("SELECT @@global.binlog_expire_logs_seconds").Scan(&old); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Exec("SET GLOBAL binlog_expire_logs_seconds = 600"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = src.Exec("SET GLOBAL binlog_expire_logs_seconds = ?", old) })
	var known []string
	for _, tc := range []struct {
		args []string
		warn bool
	}{{nil, false}, {[]string{"--max-rate", "5"}, true}} {
		r := c.run([]string{"SHARDCTL_FAULT=after:preflight"}, append([]string{"move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes"}, tc.args...)...)
		if !r.killed {
			t.Fatalf("%v: not killed after preflight: exit %d\n%s", tc.args, r.code, r.stderr)
		}
		if got := strings.Contains(r.stderr, "binlog retention: the copy of about"); got != tc.warn ||
			tc.warn && !strings.Contains(r.stderr, "raise binlog_expire_logs_seconds") {
			t.Fatalf("%v: warned %v, want %v\n%s", tc.args, got, tc.warn, r.stderr)
		}
		p := newPlan(t, c.planDir, known...)
		known = append(known, p.ID)
		c.mustRun("plan", "abort", p.ID)
	}
}
