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
	lp := c.startLoad(100, c.keys("moving", 1, 300))
	// Without SUPER, a server with a binlog lets an account create triggers
	// (the fence) only with log_bin_trust_function_creators=ON: the fence
	// step stops at once (no retries) with exit 1: a deterministic failure
	// (a resume fails the same way until the privilege is there), and the
	// plan stays resumable once it is.
	if _, err := src.Exec("SET GLOBAL log_bin_trust_function_creators = OFF"); err != nil {
		t.Fatal(err)
	}
	r := c.run(nil, "--config", cfg, "move", "--shard", "1", "--to", c.env.Addr(3).String(), "--yes", "--max-blackout", "5s")
	if r.code != 1 || !strings.Contains(r.stderr, "grant what is missing") {
		t.Fatalf("move as %s without the trigger setting: exit %d, want 1 with what to grant\n%s", user, r.code, r.stderr)
	}
	if _, err := src.Exec("SET GLOBAL log_bin_trust_function_creators = ON"); err != nil {
		t.Fatal(err)
	}
	files := planFiles(t, c.planDir)
	id := strings.TrimSuffix(filepath.Base(files[0]), ".json")
	r = c.run(nil, "--config", cfg, "plan", "resume", id)
	lp.stop(t)
	if r.code != 0 {
		t.Fatalf("resume as %s: exit %d\n%s\n%s", user, r.code, r.stdout, r.stderr)
	}
	c.checkLedger(lp)
	if strings.Contains(r.stdout+r.stderr, pw) {
		t.Error("the password appears in the output")
	}
}
