package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/plans"
)

// verifyJSON is the part of 'verify -o json' the tests read.
type verifyJSON struct {
	Mismatches []verifyChunk `json:"mismatches"`
	Repaired   *struct {
		Written, Deleted int64
	} `json:"repaired"`
	After *struct {
		Mismatches []verifyChunk `json:"mismatches"`
	} `json:"after_repair"`
}

type verifyChunk struct {
	Table string
	Rows  []struct {
		Key     []string
		Kind    string
		Columns []string
	}
}

// rowsNamed flattens the rows a verify names: "table key kind columns".
func rowsNamed(cs []verifyChunk) []string {
	var out []string
	for _, c := range cs {
		for _, r := range c.Rows {
			out = append(out, strings.TrimSpace(c.Table+" "+strings.Join(r.Key, ",")+" "+r.Kind+" "+strings.Join(r.Columns, ",")))
		}
	}
	slices.Sort(out)
	return out
}

// A copy kept by a move, with rows changed, deleted and added on it: verify
// names exactly those rows, --repair brings them back to the serving side's
// without firing the copy's own trigger, and verify is clean afterwards.
func TestVerifyNamesAndRepairsRows(t *testing.T) {
	c := newCluster(t, "e2e_vrepair", []int{1, 2}, []int{500, 300})
	c.mustRun("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--keep-source")
	old := c.env.Addr(1).String()
	s := c.shards[0].Schema
	changed, gone, added := c.shards[0].Lower+250, c.shards[0].Lower+20, c.shards[0].Lower+400
	conn, err := c.db(1).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var fromDate string
	for _, q := range []string{
		fence.BypassSQL, // the kept copy is fenced
		"SET SESSION foreign_key_checks = 0",
		"CREATE TABLE " + dbutil.Table(s, "audit") + " (emp_no INT)",
		"CREATE TRIGGER " + dbutil.Table(s, "app_audit") + " AFTER UPDATE ON " + dbutil.Table(s, "employees") + " FOR EACH ROW INSERT INTO " + dbutil.Table(s, "audit") + " VALUES (NEW.emp_no)",
		fmt.Sprintf("UPDATE %s SET last_name = 'Changed', hire_date = '2001-01-01' WHERE emp_no = %d", dbutil.Table(s, "employees"), changed),
		fmt.Sprintf("DELETE FROM %s WHERE emp_no = %d", dbutil.Table(s, "employees"), gone),
		fmt.Sprintf("INSERT INTO %s VALUES (%d, 'Extra', '2020-01-01', NULL)", dbutil.Table(s, "titles"), added),
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := conn.QueryRowContext(ctx, "SELECT DATE_FORMAT(MIN(from_date), '%Y-%m-%d') FROM "+dbutil.Table(s, "salaries")+" WHERE emp_no = ?", changed).Scan(&fromDate); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "DELETE FROM "+dbutil.Table(s, "salaries")+" WHERE emp_no = ? AND from_date = ?", changed, fromDate); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	// The trigger fired once, on the test's UPDATE.
	audit := func() int {
		var n int
		c.db(1).QueryRow("SELECT COUNT(*) FROM " + dbutil.Table(s, "audit")).Scan(&n)
		return n
	}

	want := []string{
		fmt.Sprintf("employees %d differs last_name,hire_date", changed),
		fmt.Sprintf("employees %d source_only", gone),
		fmt.Sprintf("salaries %d,%s source_only", changed, fromDate),
		fmt.Sprintf("titles %d,Extra,2020-01-01 target_only", added),
	}
	slices.Sort(want)
	r := c.run(nil, "verify", "--shard", "1", "--against", old, "--chunk-rows", "100", "-o", "json")
	var got verifyJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 5 || err != nil {
		t.Fatalf("verify of a changed copy: exit %d (%v)\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if rows := rowsNamed(got.Mismatches); !reflect.DeepEqual(rows, want) {
		t.Fatalf("rows named:\n got %q\nwant %q", rows, want)
	}
	// Killed after its first chunk, a verify continues with --resume and
	// names the same rows; a verify that ran to its end leaves no checkpoint.
	if k := c.run([]string{"SHARDCTL_FAULT=verify:chunk"}, "verify", "--shard", "1", "--against", old, "--chunk-rows", "100"); !k.killed {
		t.Fatalf("the verify was not killed at its first checkpoint: exit %d\n%s", k.code, k.stderr)
	}
	if ck, _ := filepath.Glob(filepath.Join(c.planDir, "verify-*.checkpoint")); len(ck) != 1 {
		t.Fatalf("checkpoints after the kill: %q", ck)
	}
	// The checkpoint edited to mark every table done is refused: it would
	// report a match it never compared. Nothing changes, the file included.
	ck, _ := filepath.Glob(filepath.Join(c.planDir, "verify-*.checkpoint"))
	saved, err := os.ReadFile(ck[0])
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	var name string
	if err := dbutil.ScanEach(ctx, c.db(3), "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", []any{s}, []any{&name},
		func() error { all = append(all, name); return nil }); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(ck[0], editCheckpoint(t, saved, all), 0o600)
	for _, mode := range [][]string{nil, {"-o", "json"}} {
		r = c.run(nil, append([]string{"verify", "--shard", "1", "--against", old, "--chunk-rows", "100", "--resume"}, mode...)...)
		if r.code != 2 || !strings.Contains(r.stdout+r.stderr, "delete it, or run verify without --resume") {
			t.Fatalf("verify --resume from a checkpoint edited to mark %q done: exit %d, want 2 refusing it\n%s\n%s", all, r.code, r.stdout, r.stderr)
		}
	}
	if now, _ := os.ReadFile(ck[0]); !bytes.Equal(now, editCheckpoint(t, saved, all)) {
		t.Fatalf("the refused verify changed the checkpoint:\n%s", now)
	}
	t.Logf("an edited checkpoint: %s", r.stdout)
	os.WriteFile(ck[0], saved, 0o600)
	r = c.run(nil, "verify", "--shard", "1", "--against", old, "--chunk-rows", "100", "--resume", "-o", "json")
	var resumed struct {
		verifyJSON
		Resumed string
		Chunks  int
	}
	if err := json.Unmarshal([]byte(r.stdout), &resumed); r.code != 5 || err != nil || resumed.Resumed == "" {
		t.Fatalf("verify --resume: exit %d (%v)\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if rows := rowsNamed(resumed.Mismatches); !reflect.DeepEqual(rows, want) {
		t.Fatalf("rows named after --resume:\n got %q\nwant %q", rows, want)
	}
	if ck, _ := filepath.Glob(filepath.Join(c.planDir, "verify-*.checkpoint")); len(ck) != 0 {
		t.Fatalf("checkpoints left after a verify ran to its end: %q", ck)
	}
	text := c.run(nil, "verify", "--shard", "1", "--against", old, "--chunk-rows", "100")
	t.Logf("verify:\n%s", text.stdout)
	for _, line := range []string{fmt.Sprintf("emp_no=%d differs in last_name, hire_date", changed), fmt.Sprintf("emp_no=%d only on the source", gone)} {
		if !strings.Contains(text.stdout, line) {
			t.Fatalf("text report lacks %q:\n%s", line, text.stdout)
		}
	}

	// A live shard's schema is never a repair's target: refused, nothing written.
	r = c.run(nil, "verify", "--shard", "1", "--against", c.env.Addr(2).String(), "--schema", c.shards[1].Schema, "--repair")
	if r.code != 2 || !strings.Contains(r.stderr, "location") {
		t.Fatalf("repair of a live shard: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	r = c.run(nil, "verify", "--shard", "1", "--against", old, "--chunk-rows", "100", "--repair", "-o", "json")
	got = verifyJSON{}
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil {
		t.Fatalf("verify --repair: exit %d (%v)\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if got.Repaired == nil || got.Repaired.Written != 3 || got.Repaired.Deleted != 1 || got.After == nil || len(got.After.Mismatches) != 0 {
		t.Fatalf("repair: %s", r.stdout)
	}
	if n := audit(); n != 1 {
		t.Fatalf("the copy's trigger fired on the repair: %d audit rows, want the test's 1", n)
	}
	var body string
	if err := c.db(1).QueryRow("SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND TRIGGER_NAME = 'app_audit'", s).Scan(&body); err != nil || strings.Contains(body, "shardctl") {
		t.Fatalf("the copy's trigger was not put back as it was: %q %v", body, err)
	}
	r = c.mustRun("verify", "--shard", "1", "--against", old, "--chunk-rows", "100")
	t.Logf("verify after the repair:\n%s", r.stdout)
	if !strings.Contains(r.stdout, "OK: every chunk matches") {
		t.Fatalf("after repair: %s", r.stdout)
	}
}

// Inside an operation, under the ledger load: rows changed on the target behind the tail's back
// stop the move at verify with the rows named (exit 5); 'verify --plan
// --repair' fixes the target (the source serves until cutover) and the
// resumed move finishes.
func TestVerifyStepNamesRowsAndRepairLetsTheMoveFinish(t *testing.T) {
	c := newCluster(t, "e2e_vstep", []int{2}, []int{300})
	lp := c.startLoad(50, c.keys("moving", 1, 300)) // keys above the drifted row's chunk
	r := c.run([]string{"SHARDCTL_FAULT=after:catchup"}, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--chunk-rows", "50")
	if !r.killed {
		t.Fatalf("the move was not killed after catch-up: exit %d\n%s", r.code, r.stderr)
	}
	files := planFiles(t, c.planDir)
	if len(files) != 1 {
		t.Fatalf("plan files: %q", files)
	}
	p, err := plans.Load(files[0])
	if err != nil {
		t.Fatal(err)
	}
	s := c.shards[0].Schema
	changed := c.shards[0].Lower + 123
	if _, err := c.db(3).Exec(fmt.Sprintf("UPDATE %s SET first_name = 'Drifted' WHERE emp_no = %d", dbutil.Table(s, "employees"), changed)); err != nil {
		t.Fatal(err)
	}
	r = c.run(nil, "plan", "resume", p.ID)
	if r.code != 5 || !strings.Contains(r.stderr, fmt.Sprintf("emp_no=%d differs in first_name", changed)) {
		t.Fatalf("resume with a drifted target row: exit %d, want 5 naming the row\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("resume stopped at verify:\n%s", r.stderr)
	// The plan is stopped, so its tail is not running: under the load the
	// verify after the repair may still see rows the load changed since
	// (exit 5); the drifted row is repaired either way, and the resumed
	// tail brings the rest.
	r = c.run(nil, "verify", "--plan", p.ID, "--repair", "--chunk-rows", "50")
	t.Logf("verify --plan --repair (exit %d):\n%s", r.code, r.stdout)
	if (r.code != 0 && r.code != 5) || !strings.Contains(r.stdout, fmt.Sprintf("emp_no=%d differs in first_name", changed)) || !strings.Contains(r.stdout, "repaired the copy "+c.env.Addr(3).String()) {
		t.Fatalf("verify --plan --repair: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var first string
	if err := c.db(3).QueryRow(fmt.Sprintf("SELECT first_name FROM %s WHERE emp_no = %d", dbutil.Table(s, "employees"), changed)).Scan(&first); err != nil || first == "Drifted" {
		t.Fatalf("the drifted row after the repair: %q %v", first, err)
	}
	c.mustRun("plan", "resume", p.ID)
	lp.stop(t)
	c.checkLedger(lp)
	c.wantShardAt(1, 3)
}

// editCheckpoint returns a verify checkpoint's bytes with every table of
// all marked done, as an operator's hand edit would (whether the file
// keeps the checkpoint at its top or under "checkpoint").
func editCheckpoint(t *testing.T, b []byte, all []string) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	cp := doc
	if inner, ok := doc["checkpoint"].(map[string]any); ok {
		cp = inner
	}
	cp["done"], cp["table"], cp["after"], cp["partial"] = all, "", nil, map[string]any{}
	cp["result"].(map[string]any)["tables"] = len(all)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}
