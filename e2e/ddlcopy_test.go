package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
)

// moveWithDDLDuringCopy runs a move of shard 1 to server 3 with --on-ddl
// mode and 5-row chunks (60 of employees', far more than its readers, their
// channel and its writers, each loading up to 4 chunks a statement, hold
// while one writer is held: with 20-row chunks they could read every chunk
// before the statements ran, and the copy then met no change to carry),
// holds it once the copy of employees has committed its first chunk
// (SHARDCTL_FAULT=hold:copy:employees; the tables copy in parallel, salaries
// meanwhile), runs stmts on the source there and lets it go: the chunks the
// copy read before the statements are written after them. faults are added
// to the hold (ddl:ran kills it at the statement). It returns the move's
// exit code and output.
func moveWithDDLDuringCopy(t *testing.T, c *cluster, mode, faults string, stmts []string) (int, string) {
	t.Helper()
	hold, done, out := moveHeldAt(t, c, "copy:employees", faults, []string{"--on-ddl", mode, "--chunk-rows", "5"})
	p, err := plans.Load(planFiles(t, c.planDir)[0])
	if err != nil {
		t.Fatal(err)
	}
	if m := p.Checkpoints.Copy["employees"]; m.Done || p.Done(plans.StepCopy) {
		t.Fatalf("held after the copy of employees ended: %+v", m)
	}
	for _, q := range stmts {
		if _, err := c.db(2).Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	return exitWithin(t, done, 3*time.Minute), out.String()
}

// Schema changes made on the source while the copy copies the table (ADD
// COLUMN and MODIFY of employees part-way through its chunks, ADD INDEX of
// salaries) are carried with --on-ddl apply: the copy stops before writing
// a chunk read after them, the binlog tail runs them on the target at their
// place in the stream, and the copy goes on with the new columns. The move
// finishes without a restart, its verify step clean, the ledger clean, and
// the target has the new shape and the rows written in it. A kill -9 right
// after the tail ran the first statement on the target, and a resume, end
// the same way. With --on-ddl stop the move stops at the catch-up advising
// the resume with --on-ddl apply, which carries the changes and finishes.
func TestDDLDuringCopyIsCarried(t *testing.T) {
	st := testenv.NewSubtests(t)
	for _, tc := range []struct{ name, mode, faults string }{
		{"no crash", "apply", ""},
		{"kill -9 at the statement", "apply", ",ddl:ran"},
		{"stop, resumed with apply", "stop", ""},
	} {
		st.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, "e2e_ddlcopy", []int{2}, []int{300})
			lp := c.startLoad(100, c.keys("moving", 1, 300))
			s := c.shards[0].Schema
			key := c.shards[0].Lower + 10 // below the load's keys
			emp := dbutil.Table(s, "employees")
			code, out := moveWithDDLDuringCopy(t, c, tc.mode, tc.faults, []string{
				"ALTER TABLE " + emp + " ADD COLUMN nickname VARCHAR(20) NULL DEFAULT 'none'",
				"ALTER TABLE " + dbutil.Table(s, "salaries") + " ADD INDEX by_salary (salary)",
				"ALTER TABLE " + emp + " MODIFY first_name VARCHAR(30) NOT NULL",
				fmt.Sprintf("UPDATE %s SET nickname = 'Carried', first_name = 'A name of thirty characters...' WHERE emp_no = %d", emp, key),
			})
			file := planFiles(t, c.planDir)[0]
			p, err := plans.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.mode == "stop":
				if advice := "'shardctl plan resume " + p.ID + " --on-ddl apply' carries it"; code != 1 || !strings.Contains(out, advice) {
					t.Fatalf("--on-ddl stop, schema changes during the copy: exit %d, want 1 advising %q:\n%s", code, advice, out)
				}
				c.mustRun("plan", "resume", p.ID, "--on-ddl", "apply")
				if p, err = plans.Load(file); err != nil {
					t.Fatal(err)
				}
			case tc.faults == "":
				if code != 0 {
					t.Fatalf("move with schema changes during the copy: exit %d:\n%s", code, out)
				}
			default:
				if code != -1 {
					t.Fatalf("the move was not killed at the statement: exit %d:\n%s", code, out)
				}
				c.mustRun("plan", "resume", p.ID)
				if p, err = plans.Load(file); err != nil {
					t.Fatal(err)
				}
			}
			lp.stop(t)
			c.checkLedger(lp)
			if p.State != plans.StateDone || !p.Done(plans.StepVerify) || p.Step(plans.StepVerify).State == plans.Skipped {
				t.Fatalf("the plan is %s, its verify step %+v", p.State, p.Step(plans.StepVerify))
			}
			if p.Step(plans.StepCopy).Attempts != 1 && tc.faults == "" {
				t.Fatalf("the copy step ran %d times", p.Step(plans.StepCopy).Attempts)
			}
			if len(p.DDL) != 3 {
				t.Fatalf("carried changes on record: %+v", p.DDL)
			}
			if cp := p.Step(plans.StepCopy); tc.mode == "apply" && !p.DDL[2].At.Before(cp.Ended) {
				t.Fatalf("the changes were carried at %s, after the copy ended at %s: not by the copy step", p.DDL[2].At, cp.Ended)
			}
			if tc.faults != "" && !strings.Contains(p.DDL[0].Note, "had it already") {
				t.Fatalf("the statement the crash interrupted is not noted as found on the target: %+v", p.DDL[0])
			}
			for _, tb := range p.Copy {
				if tb.Name == "employees" && !strings.Contains(strings.Join(tb.Columns, ","), "nickname") {
					t.Fatalf("the plan's columns of employees: %v", tb.Columns)
				}
			}
			dst := c.db(3)
			var nick, first, ctype string
			if err := dst.QueryRow(fmt.Sprintf("SELECT nickname, first_name FROM %s WHERE emp_no = %d", emp, key)).Scan(&nick, &first); err != nil || nick != "Carried" || len(first) != 30 {
				t.Fatalf("the row written after the changes: %q %q %v", nick, first, err)
			}
			var other int // rows copied before the change got the new column's default from the carried statement
			if err := dst.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE nickname IS NULL OR nickname NOT IN ('none', 'Carried')", emp)).Scan(&other); err != nil || other != 0 {
				t.Fatalf("employees on the target: %d rows without the new column's default, %v", other, err)
			}
			if err := dst.QueryRow("SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'employees' AND COLUMN_NAME = 'first_name'", s).Scan(&ctype); err != nil || ctype != "varchar(30)" {
				t.Fatalf("first_name on the target: %q %v", ctype, err)
			}
			var idx int
			if err := dst.QueryRow("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'salaries' AND INDEX_NAME = 'by_salary'", s).Scan(&idx); err != nil || idx != 1 {
				t.Fatalf("index by_salary on the target: %d %v", idx, err)
			}
		})
	}
}

// moveHeldAt starts a move of shard 1 to server 3 (args added) held at
// point, as startHeld does.
func moveHeldAt(t *testing.T, c *cluster, point, faults string, args []string) (string, chan int, *syncBuffer) {
	t.Helper()
	return startHeld(t, c, point, faults, append([]string{"move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes"}, args...))
}
