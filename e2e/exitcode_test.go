package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// A deterministic failure (a missing privilege) exits 1 with a message that
// names the step and the table and says what to do, and a resume repeats it
// until the cause is fixed; a transient one (SIGTERM) exits 3. Both plans
// then resume to the end.
func TestExitCodes(t *testing.T) {
	testenv.FlavorNeutral(t)
	start := time.Now()
	c := newCluster(t, "e2e_exit", []int{2, 1}, []int{200, 100})
	src := c.db(2)

	// Deterministic: cleanup cannot delete on the source (chunked deletes,
	// --cleanup delete: the default drops a whole shard's schema at once).
	r := c.run([]string{"SHARDCTL_FAULT=after:cutover"}, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--prune-chunk-rows", "100", "--cleanup", "delete")
	if !r.killed {
		t.Fatalf("fault did not kill the move: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSuffix(planFiles(t, c.planDir)[0][len(c.planDir)+1:], ".json")
	if _, err := src.Exec("REVOKE DELETE ON *.* FROM 'shardctl'@'%'"); err != nil {
		t.Fatal(err)
	}
	granted := false
	grant := func() {
		if !granted {
			granted = true
			if _, err := src.Exec("GRANT DELETE ON *.* TO 'shardctl'@'%'"); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(grant)
	for i := 0; i < 2; i++ {
		r = c.run(nil, "plan", "resume", id)
		if r.code != 1 || !strings.Contains(r.stderr, "step cleanup") || !strings.Contains(r.stderr, "GRANT") || !strings.Contains(r.stderr, "plan resume "+id) {
			t.Fatalf("resume %d without DELETE privilege: exit %d, want 1 with step, fix and resume command\n%s", i+1, r.code, r.stderr)
		}
	}
	t.Logf("deterministic failure (at %s): %s", time.Since(start).Round(time.Millisecond), lastLine(r.stderr))
	grant()
	c.mustRun("plan", "resume", id)

	// Transient: SIGTERM while the copy runs (held by the control file's pause).
	control := filepath.Join(c.dir, "control")
	if err := os.WriteFile(control, []byte("pause = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := c.command(nil, "move", "--shard", "2", "--to", c.env.Addr(3).String(), "--yes", "--chunk-rows", "50", "--control-file", control)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	for deadline := time.Now().Add(60 * time.Second); !copying(t, c); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second move never reached its copy step\n%s", errb.String())
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("shardctl did not stop within 60 s of SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("SIGTERM during the copy: exit %d, want 3\n%s", code, errb.String())
	}
	t.Logf("transient failure (at %s): %s", time.Since(start).Round(time.Millisecond), lastLine(errb.String()))
	if err := os.WriteFile(control, []byte("pause = false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range planFiles(t, c.planDir) {
		if p, err := plans.Load(f); err == nil && p.State == plans.StateStopped {
			c.mustRun("plan", "resume", p.ID)
		}
	}
	c.ownership()
	t.Logf("done at %s", time.Since(start).Round(time.Millisecond))
}

// copying reports whether some plan in the plan directory is in its copy step.
func copying(t *testing.T, c *cluster) bool {
	for _, f := range planFiles(t, c.planDir) {
		if p, err := plans.Load(f); err == nil && p.Operation == "move" && p.Source.ShardID == 2 && p.Step(plans.StepCopy).State == plans.Running {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// Preflight refuses, with the fix and exit 2, what cannot be carried safely:
// a foreign key that would cross shards after a split, a key into another
// schema, and an object whose definer has no account on the target.
func TestSchemaRefusals(t *testing.T) {
	c := newCluster(t, "e2e_refuse", []int{1, 1}, []int{100, 100})
	db := c.db(1)
	s1 := c.shards[0].Schema
	split := []string{"split", "--shard", "1", "--at", fmt.Sprint(c.shards[0].Lower + 50), "--to", c.env.Addr(3).String(), "--dry-run"}
	refused := func(what, want string, args ...string) {
		t.Helper()
		r := c.run(nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: exit %d, want 2 with %q\n%s", what, r.code, want, r.stderr)
		}
	}
	exec := func(q string) {
		t.Helper()
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE " + s1 + ".promo (id INT PRIMARY KEY, emp INT NOT NULL, CONSTRAINT fk_promo_emp FOREIGN KEY (emp) REFERENCES " + s1 + ".employees (emp_no))")
	refused("a global table referencing a sharded one", "DROP FOREIGN KEY fk_promo_emp", split...)
	c.mustRun("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--dry-run") // a move keeps every key in one shard
	exec("DROP TABLE " + s1 + ".promo")
	exec("CREATE DATABASE IF NOT EXISTS e2e_refuse_other")
	exec("CREATE TABLE IF NOT EXISTS e2e_refuse_other.t (id INT PRIMARY KEY)")
	exec("CREATE TABLE " + s1 + ".ext (id INT PRIMARY KEY, CONSTRAINT fk_ext FOREIGN KEY (id) REFERENCES e2e_refuse_other.t (id))")
	refused("a key into another schema", "references another schema", "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--dry-run")
	exec("DROP TABLE " + s1 + ".ext")
	exec("DROP DATABASE e2e_refuse_other")
	// A UNIQUE key over NOT NULL columns identifies the rows of a table
	// without a primary key (the dry run names it); one over a nullable
	// column or a FLOAT does not.
	exec("CREATE TABLE " + s1 + ".uk (code VARCHAR(8) NOT NULL, v INT, UNIQUE KEY code (code))")
	if r := c.mustRun("move", "--shard", "1", "--to", c.env.Addr(3).String(), "--dry-run"); !strings.Contains(r.stdout, "code (unique key `code`)") {
		t.Errorf("the dry run does not name the unique key:\n%s", r.stdout)
	}
	exec("DROP TABLE " + s1 + ".uk")
	exec("CREATE TABLE " + s1 + ".ukn (code VARCHAR(8), f FLOAT NOT NULL, UNIQUE KEY code (code), UNIQUE KEY f (f))")
	refused("a table whose UNIQUE keys are over a nullable column and a FLOAT", "ukn has no primary key and no UNIQUE key over NOT NULL columns",
		"move", "--shard", "1", "--to", c.env.Addr(3).String(), "--dry-run")
	exec("DROP TABLE " + s1 + ".ukn")
	// A key type chunking cannot page on is refused at preflight, not when
	// the copy reaches it: exit 2, no plan written. (Only MariaDB lets a
	// GEOMETRY column into a primary key; MySQL refuses it, error 3728.)
	if !testenv.MySQL() {
		exec("CREATE TABLE " + s1 + ".geo (p POINT NOT NULL, PRIMARY KEY (p))")
		refused("a GEOMETRY primary key", "column p of key PRIMARY has type GEOMETRY: keyset chunking cannot page on it exactly",
			"move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes")
		if files := planFiles(t, c.planDir); len(files) != 0 {
			t.Errorf("a refused move left plans: %v", files)
		}
		exec("DROP TABLE " + s1 + ".geo")
	}
	exec("CREATE DEFINER = `ghost`@`nowhere` VIEW " + s1 + ".v AS SELECT 1 AS one")
	refused("a definer without an account on the target", "`ghost`@`nowhere`", "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--dry-run")
}
