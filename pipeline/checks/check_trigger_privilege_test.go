package checks

import (
	"context"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/pipeline/checks/checktest"
)

// With log_bin_trust_function_creators OFF on a server that writes a
// binlog, an account without SUPER is refused (it could not create the
// fence's triggers); the tool account, which has SUPER, is accepted.
func TestCheckTriggerPrivilege(t *testing.T) {
	env, c := checkEnv(t, "move", "chk_trg", "CREATE TABLE t (id INT PRIMARY KEY)")
	root := c.Src
	testenv.SetGlobal(t, root, "log_bin_trust_function_creators", "OFF")
	if err := runCheck(t, "fence trigger privilege", c); err != nil {
		t.Fatalf("an account with SUPER: %v", err)
	}
	testenv.Exec(t, root, "DROP USER IF EXISTS 'chk_trg'@'%'")
	testenv.Exec(t, root, "CREATE USER 'chk_trg'@'%' IDENTIFIED BY 'chk-trg-pw'")
	t.Cleanup(func() { _, _ = root.Exec("DROP USER IF EXISTS 'chk_trg'@'%'") })
	testenv.Exec(t, root, "GRANT ALL ON `chk_trg`.* TO 'chk_trg'@'%'")
	weak, err := dbutil.Open(context.Background(), env.Addr(1), dbutil.Creds{User: "chk_trg", Password: "chk-trg-pw"}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { weak.Close() })
	c.Src = weak
	checktest.WantRefused(t, runCheck(t, "fence trigger privilege", c), "log_bin_trust_function_creators is OFF and this account has no SUPER privilege")
}
