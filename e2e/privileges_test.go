package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
)

// leastPrivileges are the grants docs/servers.md lists, for an account
// named USER that works on the schemas matching SHARDS and the shard map
// schema MAP. Kept in one place so the docs and the test agree.
func leastPrivileges(user, shards, mapSchema string) []string {
	global := "REPLICATION SLAVE, REPLICATION CLIENT, RELOAD, PROCESS"
	session := "SESSION_VARIABLES_ADMIN" // SET sql_log_bin = 0 (fence triggers stay out of the binlog)
	if !testenv.MySQL() {
		global = "REPLICATION SLAVE, BINLOG MONITOR, RELOAD, PROCESS"
		session = "BINLOG ADMIN"
	}
	return []string{
		"GRANT " + global + ", " + session + " ON *.* TO " + user,
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, REFERENCES, TRIGGER ON " + shards + ".* TO " + user,
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON " + mapSchema + ".* TO " + user,
	}
}

// TestMoveWithLeastPrivileges: a move under load runs with an account that
// has only the documented privileges, not ALL.
func TestMoveWithLeastPrivileges(t *testing.T) {
	const name = "e2e_priv"
	c := newCluster(t, name, []int{1, 2}, []int{300, 100})
	const user, pw = "shardctl_min", "least-priv-pw"
	acct := "'" + user + "'@'%'"
	for i := 1; i <= 3; i++ {
		db := c.db(i)
		stmts := append([]string{"DROP USER IF EXISTS " + acct, "CREATE USER " + acct + " IDENTIFIED BY '" + pw + "'"},
			leastPrivileges(acct, "`"+name+"\\_s%`", dbutil.QuoteIdent(name))...)
		for _, s := range stmts {
			if _, err := db.Exec(s); err != nil {
				t.Fatalf("server %d: %s: %v", i, s, err)
			}
		}
		t.Cleanup(func() { _, _ = db.Exec("DROP USER IF EXISTS " + acct) })
	}
	src := c.db(1)
	t.Cleanup(func() { _, _ = src.Exec("SET GLOBAL log_bin_trust_function_creators = OFF") })
	cfg := filepath.Join(c.dir, "least.yaml")
	body := fmt.Sprintf("shardmap: %s/%s\nuser: %s\npassword: %s\nplan-dir: %s\n", c.env.Addr(1), name, user, pw, c.planDir)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	// Without SUPER, a server with a binlog lets an account create triggers
	// (the fence) only with log_bin_trust_function_creators=ON: the move is
	// refused when planned (exit 2, what to do), before anything changes.
	if _, err := src.Exec("SET GLOBAL log_bin_trust_function_creators = OFF"); err != nil {
		t.Fatal(err)
	}
	move := []string{"--config", cfg, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "5s"}
	r := c.run(nil, move...)
	if r.code != 2 || !strings.Contains(r.stderr, "log_bin_trust_function_creators = ON") {
		t.Fatalf("move as %s without the trigger setting: exit %d, want 2 with the fix\n%s", user, r.code, r.stderr)
	}
	if files, _ := filepath.Glob(filepath.Join(c.planDir, "*.json")); len(files) > 0 {
		t.Fatalf("the refused move left plan files: %v", files)
	}
	if m, err := c.store.Load(ctx); err != nil {
		t.Fatal(err)
	} else if l, _ := m.Location(1); l.Addr() != c.env.Addr(1) {
		t.Fatalf("the refused move changed the shard map: shard 1 is at %s", l.Addr())
	}
	// A plan made while it was ON is refused the same way at apply.
	if _, err := src.Exec("SET GLOBAL log_bin_trust_function_creators = ON"); err != nil {
		t.Fatal(err)
	}
	planFile := filepath.Join(c.dir, "move.json")
	c.mustRun(append(move, "--plan-out", planFile)...)
	if _, err := src.Exec("SET GLOBAL log_bin_trust_function_creators = OFF"); err != nil {
		t.Fatal(err)
	}
	if r := c.run(nil, "--config", cfg, "plan", "apply", planFile); r.code != 2 || !strings.Contains(r.stderr, "log_bin_trust_function_creators = ON") {
		t.Fatalf("plan apply as %s without the trigger setting: exit %d, want 2 with the fix\n%s", user, r.code, r.stderr)
	}
	if _, err := src.Exec("SET GLOBAL log_bin_trust_function_creators = ON"); err != nil {
		t.Fatal(err)
	}
	lp := c.startLoad(100, c.keys("moving", 1, 300))
	r = c.run(nil, "--config", cfg, "plan", "apply", planFile)
	lp.stop(t)
	if r.code != 0 {
		t.Fatalf("plan apply as %s: exit %d\n%s\n%s", user, r.code, r.stdout, r.stderr)
	}
	c.checkLedger(lp)
	// Without LOCK TABLES no table is compared in one snapshot: a table the
	// load's writes make differ tries, and says it goes chunk by chunk and why.
	if strings.Contains(r.stderr, "verify: table compared in one snapshot per side") ||
		strings.Contains(r.stderr, "verify: table compared chunk by chunk") && !strings.Contains(r.stderr, "lock the source table for reads") {
		t.Errorf("as %s (no LOCK TABLES), the verify step froze a table or did not say why it could not:\n%s", user, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, pw) {
		t.Error("the password appears in the output")
	}
}
