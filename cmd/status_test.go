package cmd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
)

// status labels figures from statistics, and --exact and the tablespace
// sizes follow fresh inserts that the statistics may not have seen.
func TestStatusLabelsEstimates(t *testing.T) {
	flags := cliEnv(t, "cli_status")
	type out struct {
		Shards []ShardStatus `json:"shards"`
	}
	status := func(extra ...string) out {
		t.Helper()
		r := run(t, append(append(flags, "status", "-o", "json"), extra...)...)
		var o out
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &o) != nil || len(o.Shards) != 3 {
			t.Fatalf("status: exit %d %s %s", r.code, r.stdout, r.stderr)
		}
		return o
	}
	before := status()
	sh := before.Shards[0]
	if sh.RowsKind != kindEstimate || (sh.SizeKind != kindTablespace && sh.SizeKind != kindEstimate) {
		t.Fatalf("kinds: %+v", sh)
	}
	t.Logf("shard 1 before: rows %d (%s), %d bytes (%s)", sh.Rows, sh.RowsKind, sh.Bytes, sh.SizeKind)

	// Grow shard 1's biggest table by a few thousand rows in one statement.
	db := testenv.Get(t).DB(t, 1, "")
	tb := dbutil.Table(sh.Schema, "salaries")
	res, err := db.Exec("INSERT IGNORE INTO " + tb + " (emp_no, salary, from_date, to_date) SELECT s.emp_no, s.salary, s.from_date + INTERVAL k.i + 1 DAY, s.to_date FROM " + tb +
		" s CROSS JOIN (SELECT 0 i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) k")
	if err != nil {
		t.Fatal(err)
	}
	added, _ := res.RowsAffected()
	exact := status("--exact")
	if e := exact.Shards[0]; e.RowsKind != kindExact || e.Rows < sh.Rows+added/2 {
		t.Errorf("--exact after %d inserts: %+v (before %d)", added, e, sh.Rows)
	}
	if e := exact.Shards[0]; e.SizeKind == kindTablespace && e.Bytes < sh.Bytes {
		t.Errorf("tablespace size shrank after inserts: %d -> %d", sh.Bytes, e.Bytes)
	}
	t.Logf("shard 1 after %d inserts: rows %d (%s), %d bytes (%s)", added, exact.Shards[0].Rows, exact.Shards[0].RowsKind, exact.Shards[0].Bytes, exact.Shards[0].SizeKind)

	r := run(t, append(flags, "status")...)
	if !strings.Contains(r.stdout, "~") || !strings.Contains(r.stdout, "--exact") {
		t.Errorf("status does not label estimates:\n%s", r.stdout)
	}
	if r := run(t, append(flags, "status", "--exact")...); strings.Contains(r.stdout, "--exact counts") && !strings.Contains(r.stdout, "size estimate") {
		t.Errorf("status --exact still suggests --exact:\n%s", r.stdout)
	}
}

func TestStatusFigures(t *testing.T) {
	rows, size := statusFigures(ShardStatus{Rows: 269175, RowsKind: kindEstimate, Bytes: 1 << 20, SizeKind: kindEstimate})
	if rows != "~269175" || size != "~1.0 MiB" {
		t.Errorf("estimates: %s %s", rows, size)
	}
	rows, size = statusFigures(ShardStatus{Rows: 5, RowsKind: kindExact, Bytes: 1 << 20, SizeKind: kindTablespace})
	if rows != "5" || size != "1.0 MiB" {
		t.Errorf("exact: %s %s", rows, size)
	}
	if n := estimateNote([]ShardStatus{{Reachable: true, RowsKind: kindExact, SizeKind: kindTablespace}}); strings.Contains(n, "~") || !strings.Contains(n, "on disk") {
		t.Errorf("note without estimates: %q", n)
	}
}
