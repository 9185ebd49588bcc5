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

// Server versions the sandbox runs besides the system's MariaDB (10.11 on
// Debian 12): each in a Debian root of its own, built once by
// server-root.sh.
const (
	VersionSystem = ""     // the system's MariaDB, or MySQL's root's only version
	Version118    = "11.8" // MariaDB 11.8 (trixie's mariadb-server-core)
)

// A Root is a Debian root a server runs chroot'ed in: Oracle MySQL (Debian 12
// has none) or a MariaDB version Debian 12 lacks. Each server's files live
// inside the root, and DIR/s<i> is a link to them, so host and server see
// the same files.
type Root struct {
	Kind   string // server-root.sh's KIND: "mysql", "mariadb-11.8"
	Dir    string
	Server string // the server binary inside the root
}

//go:embed server-root.sh
var rootScriptText []byte

// MySQLRoot is the directory of the Debian root MySQL runs in.
func MySQLRoot() string { return mysqlRoot().Dir }

func mysqlRoot() Root {
	return Root{Kind: "mysql", Dir: envOr("SHARDCTL_MYSQL_ROOT", "/var/lib/shardctl/mysql-root"), Server: "/usr/sbin/mysqld"}
}

func mariadb118Root() Root {
	return Root{Kind: "mariadb-11.8", Dir: envOr("SHARDCTL_MARIADB118_ROOT", "/var/lib/shardctl/mariadb-11.8-root"), Server: "/usr/sbin/mariadbd"}
}

func envOr(name, def string) string {
	if d := os.Getenv(name); d != "" {
		return d
	}
	return def
}

// RootFor is the root a flavor and version run in; ok is false for the
// system's MariaDB, which runs from the host.
func RootFor(flavor, version string) (r Root, ok bool) {
	switch {
	case flavor == FlavorMySQL:
		return mysqlRoot(), true
	case version == Version118:
		return mariadb118Root(), true
	}
	return Root{}, false
}

// Ready reports whether the root is built.
func (r Root) Ready() error {
	if _, err := os.Stat(filepath.Join(r.Dir, ".shardctl-ready")); err != nil {
		return fmt.Errorf("the %s root %s is not built (run sandbox/server-root.sh %s as root, or 'shardctl sandbox up' with its flavor or version)", r.Kind, r.Dir, r.Kind)
	}
	return nil
}

// EnsureRoot builds the root of a flavor and version if it runs in one.
func EnsureRoot(ctx context.Context, flavor, version string) error {
	if r, ok := RootFor(flavor, version); ok {
		return r.Ensure(ctx)
	}
	return nil
}

// Ensure builds the root if it is missing (about a minute, needs root and
// the network; idempotent) and mounts /proc in it.
func (r Root) Ensure(ctx context.Context) error {
	if r.Ready() != nil {
		ctx, cancel := context.WithTimeout(ctx, 25*time.Minute)
		defer cancel()
		out, err := r.script(ctx).CombinedOutput()
		if err != nil {
			return fmt.Errorf("build the %s root %s: %v: %s", r.Kind, r.Dir, err, lastLines(out, 10))
		}
	}
	if _, err := os.Stat(filepath.Join(r.Dir, "proc", "self")); err != nil {
		if out, err := exec.CommandContext(ctx, "mount", "-t", "proc", "proc", filepath.Join(r.Dir, "proc")).CombinedOutput(); err != nil {
			return fmt.Errorf("mount /proc in the %s root %s: %v: %s", r.Kind, r.Dir, err, out)
		}
	}
	return nil
}

// script runs the embedded server-root.sh for r. The script is bash's
// argument, not its stdin: the script closes its stdin (exec </dev/null) so
// that nothing it runs waits on a terminal, and bash reading the script from
// stdin would stop right there.
func (r Root) script(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-c", string(rootScriptText), "server-root.sh", r.Kind, r.Dir)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	return cmd
}

// inside is a host path inside the root as the chroot'ed server sees it.
func (r Root) inside(p string) string {
	rel, err := filepath.Rel(r.Dir, p)
	if err != nil {
		return p
	}
	return "/" + rel
}

// root is the root c's servers run in; ok is false for the system's MariaDB.
func (c Config) root() (Root, bool) { return RootFor(c.Flavor, c.Version) }

func (c Config) chrooted() bool { _, ok := c.root(); return ok }

// home is where server i's files live inside the root.
func (c Config) home(i int) string {
	r, _ := c.root()
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		abs = c.Dir
	}
	key := strings.Trim(strings.ReplaceAll(abs, "/", "_"), "_")
	return filepath.Join(r.Dir, "sb", key, fmt.Sprintf("s%d", i))
}

func (c Config) mysql() bool { return c.Flavor == FlavorMySQL }

func (c Config) pidFile(i int) string {
	if c.chrooted() {
		// Read inside the root, not through DIR/s<i>: a running server is
		// still found when the link was deleted (a /tmp cleanup), so it is
		// not started a second time on the same data.
		return filepath.Join(c.home(i), c.serverName()+".pid")
	}
	return filepath.Join(c.serverDir(i), "mariadbd.pid")
}

func (c Config) serverName() string {
	if c.mysql() {
		return "mysqld"
	}
	return "mariadbd"
}

// startInRoot starts server i of a sandbox whose servers run in a root.
func (c Config) startInRoot(ctx context.Context, i int) error {
	r, _ := c.root()
	home := c.home(i)
	if err := c.ensureLink(i); err != nil {
		return err
	}
	data := filepath.Join(home, "data")
	if _, err := os.Stat(filepath.Join(data, "mysql")); err != nil {
		tmpl, err := r.template(ctx)
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
	in := r.inside(home)
	name := c.serverName()
	if !c.mysql() {
		args := append([]string{"chroot", r.Dir, r.Server}, c.serverArgs(i, in, name+".pid", "mariadb-bin")...)
		args = append(args, mariadbArgs...)
		return c.launch(ctx, i, name, args, in, filepath.Join(home, name+".out"), filepath.Join(home, "error.log"), 120*time.Second)
	}
	args := append([]string{"chroot", r.Dir, r.Server}, c.serverArgs(i, in, name+".pid", "binlog")...)
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
	return c.launch(ctx, i, name, args, in, filepath.Join(home, name+".out"), filepath.Join(home, "error.log"), 300*time.Second) // several test binaries start MySQL sandboxes at once on 2 cores: 2 minutes was seen to run out
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
	home, link := c.home(i), c.serverDir(i)
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

// template initializes a data directory once per root, so servers start
// from a copy.
func (r Root) template(ctx context.Context) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	dir := filepath.Join(r.Dir, "sb", "template")
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
	argv := []string{"chroot", r.Dir, r.Server, "--no-defaults", "--initialize-insecure", "--user=root", "--datadir=" + r.inside(data), "--log-error-verbosity=1"}
	if r.Kind != mysqlRoot().Kind { // MariaDB initializes with its own script
		argv = []string{"chroot", r.Dir, "/usr/bin/mariadb-install-db", "--no-defaults", "--datadir=" + r.inside(data), "--user=root",
			"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve", "--force"} // --force: the root has no resolveip
	}
	out, err := exec.CommandContext(ictx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("initialize a data directory in the %s root (%s): %v: %s", r.Kind, argv[2], err, lastLines(out, 10))
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

// purgeInRoot removes server i's files inside the root.
func (c Config) purgeInRoot(i int) error {
	home := c.home(i)
	if err := os.RemoveAll(home); err != nil {
		return err
	}
	_ = os.Remove(filepath.Dir(home))
	return nil
}

// upInRoot starts the servers that are not running, all at once (each
// takes seconds to start).
func (c Config) upInRoot(ctx context.Context) ([]Server, error) {
	r, _ := c.root()
	if err := r.Ensure(ctx); err != nil {
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
				err = c.startInRoot(ctx, i)
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
	if f, _ := saved(dir); f == FlavorMySQL {
		return FlavorMySQL
	}
	return FlavorMariaDB
}

// SavedVersion is the server version Up last started in dir
// (VersionSystem when none).
func SavedVersion(dir string) string {
	_, v := saved(dir)
	return v
}

// saved reads DIR/flavor: the flavor, then the version when not the system's.
func saved(dir string) (flavor, version string) {
	b, _ := os.ReadFile(filepath.Join(dir, "flavor"))
	f := strings.Fields(string(b))
	if len(f) > 0 {
		flavor = f[0]
	}
	if len(f) > 1 {
		version = f[1]
	}
	return flavor, version
}

func (c Config) saveFlavor() {
	f := c.Flavor
	if f == "" {
		f = FlavorMariaDB
	}
	if c.Version != VersionSystem {
		f += " " + c.Version
	}
	_ = os.WriteFile(filepath.Join(c.Dir, "flavor"), []byte(f+"\n"), 0o644)
}
