package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/sandbox"
)

// An application transaction left open on a moving table holds its metadata
// lock: every cutover attempt backs off and the plan's attempt records name
// the session; resumed with --kill-blockers, the session is killed before
// the next attempt and the move cuts over, the ledger load intact.
func TestCutoverNamesAndKillsLockBlockers(t *testing.T) {
	c := newCluster(t, "e2e_blockers", []int{2}, []int{300})
	lp := c.startLoad(50, c.keys("moving", 1, 300))
	app, err := dbutil.Open(ctx, c.env.Addr(2), dbutil.Creds{User: sandbox.AppUser, Password: sandbox.AppPassword}, c.shards[0].Schema) // an application works in its shard's schema
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	conn, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	moving := c.shards[0].Lower + 5 // below the load's keys
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET last_name = 'Held' WHERE emp_no = %d", dbutil.Table(c.shards[0].Schema, "employees"), moving)); err != nil {
		t.Fatal(err)
	}

	r := c.run(nil, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "300ms",
		"--cutover-attempts", "5", "--cutover-backoff", "100ms")
	if r.code != 3 {
		t.Fatalf("move behind an open transaction: exit %d, want 3 (no attempt fitted)\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	file := planFiles(t, c.planDir)[0]
	p, err := plans.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, a := range p.Attempts {
		for _, b := range a.Blockers {
			if b.ID == id && strings.HasPrefix(b.User, sandbox.AppUser+"@") && !b.Killed {
				named++
				if testenv.MySQL() && (b.Table != "employees" || b.Source != "metadata_locks") {
					t.Errorf("MySQL names the table from performance_schema: %+v", b)
				}
			}
		}
	}
	if named < len(p.Attempts) {
		t.Fatalf("%d of %d attempts name session %d:\n%s", named, len(p.Attempts), id, readAll(t, file))
	}
	show := c.mustRun("plan", "show", p.ID)
	if !strings.Contains(show.stdout, fmt.Sprintf("blocker: session %d (%s@", id, sandbox.AppUser)) {
		t.Fatalf("plan show does not name the blocker:\n%s", show.stdout)
	}
	t.Logf("plan show:\n%s", show.stdout)

	r = c.run(nil, "plan", "resume", p.ID, "--kill-blockers", "1s")
	if r.code != 0 {
		t.Fatalf("resume with --kill-blockers: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err == nil {
		t.Fatalf("the blocking session survived --kill-blockers")
	}
	p, err = plans.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	killed := false
	for _, a := range p.Attempts {
		for _, b := range a.Blockers {
			killed = killed || (b.ID == id && b.Killed)
		}
	}
	if !killed || p.State != plans.StateDone {
		out, _ := json.MarshalIndent(p.Attempts, "", " ")
		t.Fatalf("kill not on record or the move did not finish (state %s):\n%s", p.State, out)
	}
	show = c.mustRun("plan", "show", p.ID)
	if !strings.Contains(show.stdout, "KILLED") {
		t.Fatalf("plan show does not show the kill:\n%s", show.stdout)
	}
	t.Logf("plan show after the resume:\n%s", show.stdout)
	lp.stop(t)
	c.checkLedger(lp)
	var last string
	if err := c.db(3).QueryRow(fmt.Sprintf("SELECT last_name FROM %s WHERE emp_no = %d", dbutil.Table(c.shards[0].Schema, "employees"), moving)).Scan(&last); err != nil || last == "Held" {
		t.Fatalf("the killed transaction's row: %q %v", last, err)
	}
}
