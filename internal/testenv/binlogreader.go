package testenv

import (
	"os/exec"
	"strconv"
	"testing"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/sandbox"
)

// BinlogReader runs the flavor's mysqlbinlog against addr from file until
// the test ends: a binlog dump connection that never registers as a replica
// (what --replica auto cannot account for).
func BinlogReader(t testing.TB, addr dbutil.Addr, file string) {
	t.Helper()
	argv := []string{"mariadb-binlog"}
	if MySQL() {
		argv = []string{"chroot", sandbox.MySQLRoot(), "mysqlbinlog"}
	}
	argv = append(argv, "--read-from-remote-server", "--stop-never", "--host="+addr.Host, "--port="+strconv.Itoa(addr.Port),
		"--user="+sandbox.ToolUser, "--password="+sandbox.ToolPassword, file)
	reader := exec.Command(argv[0], argv[1:]...)
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Process.Kill(); _ = reader.Wait() })
}
