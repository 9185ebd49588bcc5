package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// startHeldMove starts a move with --on-ddl MODE that holds before its
// cutover (postpone file) and returns once its verify step is done, so the
// binlog tail is running; the returned channel gets its exit code, and
// stderr holds its messages once the code is in.
func startHeldMove(t *testing.T, c *cluster, mode string, env ...string) (postpone string, done chan int, pid int) {
	postpone, done, pid, _ = startHeldMoveOut(t, c, mode, env...)
	return postpone, done, pid
}

// startHeldMoveOut is startHeldMove with the move's stderr.
func startHeldMoveOut(t *testing.T, c *cluster, mode string, env ...string) (postpone string, done chan int, pid int, stderr *strings.Builder) {
	t.Helper()
	postpone = filepath.Join(c.dir, "postpone")
	if err := os.WriteFile(postpone, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	move := c.command(env, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--on-ddl", mode, "--postpone-cutover-file", postpone)
	errb := &strings.Builder{}
	move.Stderr = errb
	if err := move.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = move.Process.Kill() })
	done = make(chan int, 1)
	go func() {
		_ = move.Wait()
		if move.ProcessState.ExitCode() != 0 {
			t.Logf("move stderr:\n%s", errb.String())
		}
		done <- move.ProcessState.ExitCode()
	}()
	waitPlanStep(t, c.planDir, plans.StepVerify)
	return postpone, done, move.Process.Pid, errb
}

// Schema changes on the source while a move's tail runs under the ledger
// load are carried to the target at their place in the stream (ADD COLUMN,
// ADD INDEX, MODIFY of a type), recorded in the plan, and survive a kill -9
// of the move: the resumed move cuts over with the target in the new shape
// and the rows written after the changes.
func TestDDLDuringMoveIsCarried(t *testing.T) {
	c := newCluster(t, "e2e_ddl", []int{2}, []int{300})
	lp := c.startLoad(100, c.keys("moving", 1, 300))
	postpone, done, pid := startHeldMove(t, c, "apply")
	s := c.shards[0].Schema
	src := c.db(2)
	key := c.shards[0].Lower + 10 // below the load's keys
	for _, q := range []string{
		"ALTER TABLE " + dbutil.Table(s, "employees") + " ADD COLUMN nickname VARCHAR(20) NULL DEFAULT 'none'",
		"ALTER TABLE " + dbutil.Table(s, "salaries") + " ADD INDEX by_salary (salary)",
		"ALTER TABLE " + dbutil.Table(s, "employees") + " MODIFY first_name VARCHAR(30) NOT NULL",
		fmt.Sprintf("UPDATE %s SET nickname = 'Carried', first_name = 'A name of thirty characters...' WHERE emp_no = %d", dbutil.Table(s, "employees"), key),
	} {
		if _, err := src.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The plan records the three changes once the tail has carried them.
	file := planFiles(t, c.planDir)[0]
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := plans.Load(file)
		if err == nil && len(p.DDL) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plan did not record 3 carried changes within a minute:\n%s", readAll(t, file))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the load writes on in the new shape
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := os.Remove(postpone); err != nil {
		t.Fatal(err)
	}
	p, err := plans.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	r := c.mustRun("plan", "resume", p.ID)
	t.Logf("resumed: %s", r.stdout)
	lp.stop(t)
	c.checkLedger(lp)

	dst := c.db(3)
	var nick, first, ctype string
	if err := dst.QueryRow(fmt.Sprintf("SELECT nickname, first_name FROM %s WHERE emp_no = %d", dbutil.Table(s, "employees"), key)).Scan(&nick, &first); err != nil || nick != "Carried" || len(first) != 30 {
		t.Fatalf("the row written after the changes: %q %q %v", nick, first, err)
	}
	if err := dst.QueryRow("SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'employees' AND COLUMN_NAME = 'first_name'", s).Scan(&ctype); err != nil || ctype != "varchar(30)" {
		t.Fatalf("first_name on the target: %q %v", ctype, err)
	}
	var idx int
	if err := dst.QueryRow("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'salaries' AND INDEX_NAME = 'by_salary'", s).Scan(&idx); err != nil || idx != 1 {
		t.Fatalf("index by_salary on the target: %d %v", idx, err)
	}
	show := c.mustRun("plan", "show", p.ID)
	if !strings.Contains(show.stdout, "schema changes carried") || !strings.Contains(show.stdout, "ADD INDEX by_salary") {
		t.Fatalf("plan show does not list the changes:\n%s", show.stdout)
	}
	t.Logf("plan show:\n%s", show.stdout)
}

// A schema change the tail cannot carry safely (a RENAME of a sharded table)
// stops the move with exit 1 naming the statement; nothing after it is
// applied, and the plan can be aborted.
func TestDDLThatCannotBeCarriedStops(t *testing.T) {
	c := newCluster(t, "e2e_ddlrefuse", []int{2}, []int{300})
	lp := c.startLoad(100, c.keys("moving", 1, 300))
	_, done, _, stderr := startHeldMoveOut(t, c, "apply")
	s := c.shards[0].Schema
	q := "RENAME TABLE " + dbutil.Table(s, "titles") + " TO " + dbutil.Table(s, "titles_old")
	if _, err := c.db(2).Exec(q); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 1 {
			t.Fatalf("move after a RENAME of a sharded table: exit %d, want 1", code)
		}
	case <-time.After(time.Minute):
		t.Fatal("the move did not stop within a minute of the RENAME")
	}
	p, err := plans.Load(planFiles(t, c.planDir)[0])
	if err != nil {
		t.Fatal(err)
	}
	// Issue 31: the way out is an abort; a resume would stop at the statement again.
	if out := stderr.String(); !strings.Contains(out, "shardctl plan abort "+p.ID) || strings.Contains(out, "continue it with") {
		t.Fatalf("the stop does not advise the abort alone:\n%s", out)
	}
	st := p.Step(plans.StepFence)
	if st == nil || !strings.Contains(st.Error, "does not carry a RENAME of a table") || !strings.Contains(st.Error, "titles_old") {
		t.Fatalf("the stop does not name the refused statement: %+v", st)
	}
	lp.stop(t)
	c.mustRun("plan", "abort", p.ID)
	c.checkLedger(lp)
}

// --on-ddl ignore: the operator changes the target; the tail records the
// source's statement without running it and goes on with the new columns.
func TestDDLIgnoredWhenTheOperatorChangesTheTarget(t *testing.T) {
	c := newCluster(t, "e2e_ddlignore", []int{2}, []int{300})
	lp := c.startLoad(100, c.keys("moving", 1, 300))
	postpone, done, _ := startHeldMove(t, c, "ignore")
	s := c.shards[0].Schema
	add := "ALTER TABLE " + dbutil.Table(s, "employees") + " ADD COLUMN nickname VARCHAR(20) NULL"
	for _, db := range []int{3, 2} { // the target first, as the operator does
		if _, err := c.db(db).Exec(add); err != nil {
			t.Fatal(err)
		}
	}
	key := c.shards[0].Lower + 10
	if _, err := c.db(2).Exec(fmt.Sprintf("UPDATE %s SET nickname = 'Kept' WHERE emp_no = %d", dbutil.Table(s, "employees"), key)); err != nil {
		t.Fatal(err)
	}
	file := planFiles(t, c.planDir)[0]
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if p, err := plans.Load(file); err == nil && len(p.DDL) == 1 {
			if p.DDL[0].Mode != "ignore" || p.DDL[0].Ran != "" {
				t.Fatalf("recorded: %+v", p.DDL[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plan did not record the change:\n%s", readAll(t, file))
		}
	}
	if err := os.Remove(postpone); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("move with --on-ddl ignore: exit %d", code)
	}
	lp.stop(t)
	c.checkLedger(lp)
	var nick string
	if err := c.db(3).QueryRow(fmt.Sprintf("SELECT nickname FROM %s WHERE emp_no = %d", dbutil.Table(s, "employees"), key)).Scan(&nick); err != nil || nick != "Kept" {
		t.Fatalf("the row written after the change: %q %v", nick, err)
	}
}

// A crash right after the change is recorded, or right after it ran on the
// target, resumes at the statement: it runs (or meets what it did), and the
// move finishes with the target in the new shape.
func TestDDLCarriedAcrossACrashAtTheStatement(t *testing.T) {
	st := testenv.NewSubtests(t)
	for _, point := range []string{"ddl:recorded", "ddl:ran"} {
		st.Run(point, func(t *testing.T) {
			c := newCluster(t, "e2e_ddlcrash", []int{2}, []int{300})
			lp := c.startLoad(100, c.keys("moving", 1, 300))
			postpone, done, _ := startHeldMove(t, c, "apply", "SHARDCTL_FAULT="+point)
			s := c.shards[0].Schema
			if _, err := c.db(2).Exec("ALTER TABLE " + dbutil.Table(s, "employees") + " ADD COLUMN nickname VARCHAR(20) NULL DEFAULT 'none'"); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-done:
				if code != -1 {
					t.Fatalf("the move was not killed at %s: exit %d", point, code)
				}
			case <-time.After(time.Minute):
				t.Fatalf("the move did not reach %s within a minute", point)
			}
			if err := os.Remove(postpone); err != nil {
				t.Fatal(err)
			}
			p, err := plans.Load(planFiles(t, c.planDir)[0])
			if err != nil {
				t.Fatal(err)
			}
			c.mustRun("plan", "resume", p.ID)
			lp.stop(t)
			c.checkLedger(lp)
			if p, err = plans.Load(planFiles(t, c.planDir)[0]); err != nil {
				t.Fatal(err)
			}
			if len(p.DDL) != 1 || (point == "ddl:ran") != strings.Contains(p.DDL[0].Note, "had it already") {
				t.Fatalf("carried changes on record: %+v", p.DDL)
			}
			var n int
			if err := c.db(3).QueryRow("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'employees' AND COLUMN_NAME = 'nickname'", s).Scan(&n); err != nil || n != 1 {
				t.Fatalf("nickname on the target: %d %v", n, err)
			}
		})
	}
}
