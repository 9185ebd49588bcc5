package sandbox

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Server flavors the sandbox runs.
const (
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"
)

// Oracle MySQL runs chroot'ed in a Debian sid root (Debian 12 has no Oracle
// MySQL), built once by mysql-root.sh. Each server's files live inside the
// root, and DIR/s<i> is a link to them, so host and server see the same files.

//go:embed mysql-root.sh
var mysqlRootScript []byte

// MySQLRoot is the directory of the Debian root MySQL runs in.
func MySQLRoot() string {
	if d := os.Getenv("SHARDCTL_MYSQL_ROOT"); d != "" {
		return d
	}
	return "/var/lib/shardctl/mysql-root"
}

// MySQLRootReady reports whether the root is built.
func MySQLRootReady() error {
	root := MySQLRoot()
	if _, err := os.Stat(filepath.Join(root, ".shardctl-ready")); err != nil {
		return fmt.Errorf("the MySQL root %s is not built (run sandbox/mysql-root.sh as root, or 'shardctl sandbox up --flavor mysql')", root)
	}
	return nil
}

// EnsureMySQLRoot builds the root if it is missing (about a minute, needs
// root and the network; idempotent) and mounts /proc in it.
func EnsureMySQLRoot(ctx context.Context) error {
	root := MySQLRoot()
	if MySQLRootReady() != nil {
		ctx, cancel := context.WithTimeout(ctx, 25*time.Minute)
		defer cancel()
		out, err := rootScript(ctx, root).CombinedOutput()
		if err != nil {
			return fmt.Errorf("build the MySQL root %s: %v: %s", root, err, lastLines(out, 10))
		}
	}
	if _, err := os.Stat(filepath.Join(root, "proc", "self")); err != nil {
		if out, err := exec.CommandContext(ctx, "mount", "-t", "proc", "proc", filepath.Join(root, "proc")).CombinedOutput(); err != nil {
			return fmt.Errorf("mount /proc in the MySQL root %s: %v: %s", root, err, out)
		}
	}
	return nil
}

// rootScript runs the embedded mysql-root.sh on root. The script is bash's
// argument, not its stdin: the script closes its stdin (exec </dev/null) so
// that nothing it runs waits on a terminal, and bash reading the script from
// stdin would stop right there.
func rootScript(ctx context.Context, root string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-c", string(mysqlRootScript), "mysql-root.sh", root)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	return cmd
}

// inRoot is a host path inside the root as the chroot'ed server sees it.
func inRoot(p string) string {
	rel, err := filepath.Rel(MySQLRoot(), p)
	if err != nil {
		return p
	}
	return "/" + rel
}

// mysqlHome is where server i's files live inside the root.
func (c Config) mysqlHome(i int) string {
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		abs = c.Dir
	}
	key := strings.Trim(strings.ReplaceAll(abs, "/", "_"), "_")
	return filepath.Join(MySQLRoot(), "sb", key, fmt.Sprintf("s%d", i))
}

func (c Config) mysql() bool { return c.Flavor == FlavorMySQL }

func (c Config) pidFile(i int) string {
	if c.mysql() {
		// Read inside the root, not through DIR/s<i>: a running server is
		// still found when the link was deleted (a /tmp cleanup), so it is
		// not started a second time on the same data.
		return filepath.Join(c.mysqlHome(i), "mysqld.pid")
	}
	return filepath.Join(c.serverDir(i), "mariadbd.pid")
}

// startMySQL starts server i of a MySQL sandbox.
func (c Config) startMySQL(ctx context.Context, i int) error {
	home := c.mysqlHome(i)
	if err := c.ensureLink(i); err != nil {
		return err
	}
	data := filepath.Join(home, "data")
	if _, err := os.Stat(filepath.Join(data, "mysql")); err != nil {
		tmpl, err := mysqlTemplate(ctx)
		if err != nil {
			return err
		}
		if out, err := exec.CommandContext(ctx, "cp", "-a", tmpl, data).CombinedOutput(); err != nil {
			return fmt.Errorf("copy template datadir: %v: %s", err, out)
		}
		// Each server makes its own server_uuid (GTIDs name it).
		_ = os.Remove(filepath.Join(data, "auto.cnf"))
	}
	for _, d := range []string{"binlog", "tmp"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			return err
		}
	}
	_ = os.Remove(c.pidFile(i))
	// So does its socket's lock file, which names its pid: mysqld refuses
	// to start while any process has that pid, and a killed server's pid
	// is still a zombie's for a moment, or another process's once pids wrap
	// (this kernel's pid_max is 32768, and a CI run starts tens of
	// thousands of processes): seen as "Another process with pid N is using
	// unix socket file". The server is not running (Up checked), so the
	// lock is stale.
	_ = os.Remove(filepath.Join(home, "sock.lock"))
	in := inRoot(home)
	args := append([]string{"chroot", MySQLRoot(), "/usr/sbin/mysqld"}, c.serverArgs(i, in, "mysqld.pid", "binlog")...)
	args = append(args,
		"--gtid-mode=ON",
		"--enforce-gtid-consistency=ON",
		"--log-replica-updates=ON",
		"--mysqlx=OFF",
		"--secure-file-priv=",
		"--local-infile=ON",
		"--log-error-verbosity=2",
		// Tests build rows with recursive CTEs (MariaDB has seq_1_to_N tables).
		"--cte-max-recursion-depth=10000000",
	)
	if c.Lean {
		args = append(args, leanPerformanceSchema...)
	}
	return c.launch(ctx, i, "mysqld", args, in, filepath.Join(home, "mysqld.out"), filepath.Join(home, "error.log"), 300*time.Second) // several test binaries start MySQL sandboxes at once on 2 cores: 2 minutes was seen to run out
}

// leanPerformanceSchema is Config.Lean's performance_schema sizing.
var leanPerformanceSchema = []string{
	"--performance-schema-digests-size=0",
	"--performance-schema-max-digest-length=0",
	"--performance-schema-max-sql-text-length=0",
	"--performance-schema-error-size=0",
	"--performance-schema-events-statements-history-size=0",
	"--performance-schema-events-statements-history-long-size=0",
	"--performance-schema-events-stages-history-size=0",
	"--performance-schema-events-stages-history-long-size=0",
	"--performance-schema-events-waits-history-size=0",
	"--performance-schema-events-waits-history-long-size=0",
	"--performance-schema-events-transactions-history-size=0",
	"--performance-schema-events-transactions-history-long-size=0",
}

var templateMu sync.Mutex

// ensureLink makes DIR/s<i> point at server i's files inside the root
// (again, if something deleted it while the server ran).
func (c Config) ensureLink(i int) error {
	home, link := c.mysqlHome(i), c.serverDir(i)
	if _, err := os.Lstat(link); err == nil {
		return nil
	}
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	if err := os.Symlink(home, link); err != nil && !os.IsExist(err) {
		return err
	}
	return nil
}

// mysqlTemplate initializes a data directory once per root, so servers start from a copy.
func mysqlTemplate(ctx context.Context) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	dir := filepath.Join(MySQLRoot(), "sb", "template")
	if _, err := os.Stat(filepath.Join(dir, "mysql")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "template-")
	if err != nil {
		return "", err
	}
	data := filepath.Join(tmp, "data")
	ictx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ictx, "chroot", MySQLRoot(), "/usr/sbin/mysqld", "--no-defaults", "--initialize-insecure",
		"--user=root", "--datadir="+inRoot(data), "--log-error-verbosity=1").CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("mysqld --initialize-insecure: %v: %s", err, lastLines(out, 10))
	}
	// Rename is atomic, so a concurrent test binary either sees the whole template or none.
	if err := os.Rename(data, dir); err != nil {
		os.RemoveAll(tmp)
		if _, statErr := os.Stat(filepath.Join(dir, "mysql")); statErr == nil {
			return dir, nil
		}
		return "", err
	}
	os.RemoveAll(tmp)
	return dir, nil
}

// purgeMySQL removes server i's files inside the root.
func (c Config) purgeMySQL(i int) error {
	home := c.mysqlHome(i)
	if err := os.RemoveAll(home); err != nil {
		return err
	}
	_ = os.Remove(filepath.Dir(home))
	return nil
}

// upMySQL starts the MySQL servers that are not running, all at once (each
// takes seconds to start).
func (c Config) upMySQL(ctx context.Context) ([]Server, error) {
	if err := EnsureMySQLRoot(ctx); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	c.saveFlavor()
	errs := make(chan error, c.total())
	for i := 1; i <= c.total(); i++ {
		go func() {
			err := c.ensureLink(i)
			if err != nil {
				errs <- err
				return
			}
			if st := c.status(ctx, i); st.Running {
				if !st.Answers {
					err = c.waitReady(ctx, i, 120*time.Second)
				}
			} else {
				err = c.startMySQL(ctx, i)
			}
			if err != nil {
				err = fmt.Errorf("sandbox server %d (port %d): %w", i, c.port(i), err)
			}
			errs <- err
		}()
	}
	var first error
	for i := 0; i < c.total(); i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	return c.upReplicas(ctx)
}

// SavedFlavor is the flavor Up last started in dir (mariadb when none).
func SavedFlavor(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "flavor"))
	if err == nil && strings.TrimSpace(string(b)) == FlavorMySQL {
		return FlavorMySQL
	}
	return FlavorMariaDB
}

func (c Config) saveFlavor() {
	f := c.Flavor
	if f == "" {
		f = FlavorMariaDB
	}
	_ = os.WriteFile(filepath.Join(c.Dir, "flavor"), []byte(f+"\n"), 0o644)
}
