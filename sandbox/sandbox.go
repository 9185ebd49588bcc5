// Package sandbox runs local MariaDB servers as plain processes on loopback
// ports (no systemd, no Docker) for the demo and the tests. Each server has its
// own data directory, binary log in ROW format with full row images, and a
// distinct server_id.
package sandbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/shardctl/shardctl/dbutil"
)

// Tool account the sandbox creates on every server. Sandbox only: a real
// deployment brings its own accounts.
const (
	ToolUser     = "shardctl"
	ToolPassword = "sandbox-secret-pw"
	AppUser      = "app"
	AppPassword  = "sandbox-app-pw"
)

// Config says where and how many servers run.
type Config struct {
	Dir      string // parent directory; server i lives in Dir/s<i>
	Servers  int    // how many servers
	BasePort int    // server i listens on BasePort+i-1
	// Replicas gives each server that many GTID replicas, themselves sandbox
	// servers numbered after the servers (ReplicaIndex), on the ports that follow.
	Replicas int
	// ExtraArgs are appended to every server's mariadbd arguments (a later
	// option wins), for example --skip-log-bin for a test of a server without a binlog.
	ExtraArgs []string
	// Unreported leaves report_host and report_port unset: a replica then
	// names no address to its source (MariaDB's does not register at all),
	// as many production replicas do.
	Unreported bool
	// Flavor is FlavorMariaDB (the default, "") or FlavorMySQL.
	Flavor string
	// Version is VersionSystem (the system's MariaDB, or MySQL's root) or
	// Version118 (MariaDB 11.8, from a root of its own).
	Version string
	// ServerIDBase is added to every server's server_id (server i has
	// ServerIDBase+i), so two sandboxes can replicate to each other.
	ServerIDBase int
	// TLS gives the servers a certificate signed by the sandbox's own CA
	// (TLSDir); ExtraArgs can then add --require-secure-transport=ON.
	TLS bool
	// BufferPoolMB is every server's InnoDB buffer pool in MiB; 0 is
	// DefaultBufferPoolMB (what the tests run with). A benchmark of a shard
	// larger than that gives a pool that holds it, or it measures the disk.
	BufferPoolMB int
	// DieWithParent has the kernel kill every server this process starts
	// when the process ends (Linux's parent-death signal): a test binary
	// killed by its timeout then leaves no server running. 'shardctl
	// sandbox up' starts servers that outlive it, and leaves it off.
	DieWithParent bool
	// Lean starts MySQL servers with performance_schema's statement digests
	// and event histories sized 0: they cost every start of a test's server
	// 0.7 CPU-s and 160 MB, and nothing reads them (shardctl reads only
	// metadata_locks and threads, which stay). MariaDB's performance_schema
	// is off by default. The tests' servers are lean; 'sandbox up' (the demo,
	// the benchmarks) starts stock ones.
	Lean bool
}

// DefaultBufferPoolMB is the sandbox servers' InnoDB buffer pool unless
// Config.BufferPoolMB says otherwise.
const DefaultBufferPoolMB = 256

// MaxBufferPoolMB bounds Config.BufferPoolMB (1 TiB).
const MaxBufferPoolMB = 1 << 20

func (c Config) bufferPoolMB() int {
	if c.BufferPoolMB == 0 {
		return DefaultBufferPoolMB
	}
	return c.BufferPoolMB
}

// Server is one sandbox server's state as Status finds it.
type Server struct {
	Index   int    `json:"index"`
	Port    int    `json:"port"`
	DataDir string `json:"datadir"`
	PID     int    `json:"pid"`
	Running bool   `json:"running"`
	Answers bool   `json:"answers"`
	// ReplicaOf is the index of the server this one replicates from (0: none).
	ReplicaOf int `json:"replica_of,omitempty"`
}

// Addr returns the server's loopback address.
func (s Server) Addr() dbutil.Addr { return dbutil.Addr{Host: "127.0.0.1", Port: s.Port} }

// total is how many processes the sandbox runs: the servers and their replicas.
func (c Config) total() int { return c.Servers * (1 + c.Replicas) }

// ReplicaIndex is the index of replica k (1-based) of server i.
func (c Config) ReplicaIndex(i, k int) int { return c.Servers + (i-1)*c.Replicas + k }

// SourceOf is the server that sandbox server idx replicates from (0: none).
func (c Config) SourceOf(idx int) int {
	if idx <= c.Servers || c.Replicas == 0 {
		return 0
	}
	return (idx-c.Servers-1)/c.Replicas + 1
}

// MaxReplicas bounds Config.Replicas.
const MaxReplicas = 4

func (c Config) serverDir(i int) string { return filepath.Join(c.Dir, fmt.Sprintf("s%d", i)) }
func (c Config) port(i int) int         { return c.BasePort + i - 1 }

// Validate checks the config.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("sandbox directory is empty: give --dir")
	}
	if c.Servers < 1 || c.Servers > 16 {
		return fmt.Errorf("sandbox servers %d: give 1 to 16", c.Servers)
	}
	if c.Replicas < 0 || c.Replicas > MaxReplicas {
		return fmt.Errorf("sandbox replicas %d: give 0 to %d per server", c.Replicas, MaxReplicas)
	}
	if c.BasePort < 1024 || c.BasePort+c.total()-1 > 65535 {
		return fmt.Errorf("sandbox base port %d: give a port from 1024 up", c.BasePort)
	}
	if c.Flavor != "" && c.Flavor != FlavorMariaDB && c.Flavor != FlavorMySQL {
		return fmt.Errorf("sandbox flavor %q: give mariadb or mysql", c.Flavor)
	}
	switch {
	case c.Version == VersionSystem:
	case c.Version == Version118 && !c.mysql():
	case c.mysql():
		return fmt.Errorf("sandbox server version %q: MySQL runs the version its root has (9.7); give no version, or --flavor mariadb with --server-version 11.8", c.Version)
	default:
		return fmt.Errorf("sandbox server version %q: give 11.8 (MariaDB 11.8, from a root built on first use), or none for the system's MariaDB", c.Version)
	}
	if c.BufferPoolMB != 0 && (c.BufferPoolMB < 64 || c.BufferPoolMB > MaxBufferPoolMB) {
		return fmt.Errorf("sandbox buffer pool %d MB: give 64 to %d", c.BufferPoolMB, MaxBufferPoolMB)
	}
	return nil
}

// Creds returns the tool account.
func Creds() dbutil.Creds { return dbutil.Creds{User: ToolUser, Password: ToolPassword} }

// Binary finds a MariaDB program by name, looking in sbin directories too.
func Binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/bin"} {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found: install MariaDB (apt-get install -y mariadb-server mariadb-client)", name)
}

// Up starts every server that is not running, initializing data directories
// on first use. It is idempotent: running servers are left alone.
func Up(ctx context.Context, c Config) ([]Server, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.TLS {
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("sandbox dir: %w", err)
		}
		if err := c.ensureTLS(ctx); err != nil {
			return nil, fmt.Errorf("sandbox TLS: %w", err)
		}
	}
	if c.chrooted() {
		return c.upInRoot(ctx)
	}
	mariadbd, err := Binary("mariadbd")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	c.saveFlavor()
	for i := 1; i <= c.total(); i++ {
		if err := c.startOne(ctx, mariadbd, i); err != nil {
			return nil, fmt.Errorf("sandbox server %d (port %d): %w", i, c.port(i), err)
		}
	}
	return c.upReplicas(ctx)
}

func (c Config) startOne(ctx context.Context, mariadbd string, i int) error {
	dir := c.serverDir(i)
	data := filepath.Join(dir, "data")
	if st := c.status(ctx, i); st.Running {
		if !st.Answers {
			if err := c.waitReady(ctx, i, 30*time.Second); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := os.Stat(filepath.Join(data, "mysql")); err != nil {
		if err := initDataDir(ctx, dir, data); err != nil {
			return err
		}
	}
	// A killed server leaves its pid file behind; it would make the start-up check fail.
	_ = os.Remove(c.pidFile(i))
	for _, d := range []string{"binlog", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	args := append([]string{mariadbd}, c.serverArgs(i, dir, "mariadbd.pid", "mariadb-bin")...)
	args = append(args, mariadbArgs...)
	return c.launch(ctx, i, "mariadbd", args, dir, filepath.Join(dir, "mariadbd.out"), filepath.Join(dir, "error.log"), 60*time.Second)
}

// mariadbArgs are the flags every MariaDB version starts with, after serverArgs.
var mariadbArgs = []string{
	"--binlog-format=ROW",
	"--gtid-domain-id=0",
	"--log-slave-updates",
	"--innodb-log-file-size=256M",
	"--skip-log-warnings",
}

// serverArgs are the flags both flavors start with; dir is the server's
// directory as the server sees it (inside its root, if it runs in one).
func (c Config) serverArgs(i int, dir, pidFile, binlog string) []string {
	args := []string{
		"--no-defaults",
		"--user=root",
		"--datadir=" + dir + "/data",
		// A private tmpdir: at start-up mariadbd deletes every #sql* file in its
		// tmpdir, which, in a shared /tmp, pulls the internal temporary tables
		// from under other running servers (errors on delete, and a segfault in
		// ha_maria::drop_table).
		"--tmpdir=" + dir + "/tmp",
		"--socket=" + dir + "/sock",
		"--pid-file=" + dir + "/" + pidFile,
		"--log-error=" + dir + "/error.log",
		"--port=" + strconv.Itoa(c.port(i)),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--server-id=" + strconv.Itoa(c.ServerIDBase+i),
		"--log-bin=" + dir + "/binlog/" + binlog,
		"--binlog-row-image=FULL",
		"--binlog-row-metadata=FULL",
		"--max-connections=500",
		"--innodb-buffer-pool-size=" + strconv.Itoa(c.bufferPoolMB()) + "M",
		// Sandbox durability is traded for speed; a production server keeps its own settings.
		"--innodb-flush-log-at-trx-commit=2",
		"--sync-binlog=0",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
	}
	if !c.Unreported {
		// A replica names itself to its source (SHOW REPLICAS lists it), so --replica auto finds it.
		args = append(args, "--report-host=127.0.0.1", "--report-port="+strconv.Itoa(c.port(i)))
	}
	return args
}

// launch starts server i (a name's binary) with argv (plus TLS, whose files go under tlsDir,
// and ExtraArgs), output appended to logPath, waits until it answers and
// creates the accounts.
func (c Config) launch(ctx context.Context, i int, name string, argv []string, tlsDir, logPath, errorLog string, ready time.Duration) error {
	targs, err := c.tlsArgs(i, tlsDir)
	if err != nil {
		return err
	}
	argv = append(argv, targs...)
	argv = append(argv, c.ExtraArgs...)
	var logStart int64 // the error log is appended to across starts: read this start's part
	if st, err := os.Stat(errorLog); err == nil {
		logStart = st.Size()
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if c.DieWithParent {
		// The signal follows the thread that started the server; the Go
		// runtime ends no thread but one a goroutine locked and left locked,
		// which this package never does.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reap if it exits while we are alive
	if err := c.waitStarted(ctx, i, ready, errorLog, logStart); err != nil {
		// A start that failed leaves no process behind: a server that could
		// not bind its port still shuts InnoDB down (and writes its buffer
		// pool dump) for a second or more, into the data directory a retry
		// on other ports is about to fill again.
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		return fmt.Errorf("%w (see %s)", err, errorLog)
	}
	return c.createAccounts(ctx, i)
}

// initDataDir copies a template data directory (made once per MariaDB
// version with mariadb-install-db) so starting many servers stays fast.
func initDataDir(ctx context.Context, dir, data string) error {
	tmpl, err := template(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "cp", "-a", tmpl, data).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy template datadir: %v: %s", err, out)
	}
	return nil
}

func template(ctx context.Context) (string, error) {
	mariadbd, err := Binary("mariadbd")
	if err != nil {
		return "", err
	}
	ver, err := exec.CommandContext(ctx, mariadbd, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("mariadbd --version: %w", err)
	}
	key := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' {
			return r
		}
		return '_'
	}, strings.Fields(string(ver))[2])
	dir := filepath.Join(os.TempDir(), "shardctl-datadir-template-"+key)
	if _, err := os.Stat(filepath.Join(dir, "mysql")); err == nil {
		return dir, nil
	}
	installDB, err := Binary("mariadb-install-db")
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "shardctl-template-")
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, installDB, "--no-defaults", "--datadir="+tmp, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("mariadb-install-db: %v: %s", err, lastLines(out, 10))
	}
	// Rename is atomic, so a concurrent test binary either sees the whole template or none.
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, statErr := os.Stat(filepath.Join(dir, "mysql")); statErr == nil {
			return dir, nil
		}
		return "", err
	}
	return dir, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c Config) socket(i int) string {
	// Unix socket paths are limited to ~107 bytes; keep them short.
	return filepath.Join(c.serverDir(i), "sock")
}

// rootDB connects as root over the server's unix socket.
func (c Config) rootDB(i int) (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "unix"
	cfg.Addr = c.socket(i)
	cfg.Timeout = 2 * time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

func (c Config) ping(ctx context.Context, i int) bool {
	db, err := c.rootDB(i)
	if err != nil {
		return false
	}
	defer db.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return db.PingContext(pctx) == nil
}

func (c Config) waitReady(ctx context.Context, i int, limit time.Duration) error {
	return c.waitStarted(ctx, i, limit, "", 0)
}

// ErrPortInUse: a starting server found its port taken (by a process that
// took it after the port was found free); a start on other ports can succeed.
var ErrPortInUse = errors.New("the server's port is in use")

// waitStarted is waitReady for a server just launched whose error log
// (errorLog, from byte from on) says why it stopped: a server that cannot
// bind its port writes so and exits before its pid file exists, so without
// the log the wait would run to its limit.
func (c Config) waitStarted(ctx context.Context, i int, limit time.Duration, errorLog string, from int64) error {
	deadline := time.Now().Add(limit)
	for n := 0; time.Now().Before(deadline); n++ {
		if c.ping(ctx, i) {
			return nil
		}
		exited := false
		if pid := c.pid(i); pid > 0 && !alive(pid) {
			exited = true
		}
		if errorLog != "" && (exited || n%10 == 9) && portTaken(errorLog, from) {
			return fmt.Errorf("%w: port %d (see %s)", ErrPortInUse, c.port(i), errorLog)
		}
		if exited {
			return errors.New("the server exited during start-up")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("the server did not answer within %s", limit)
}

func (c Config) createAccounts(ctx context.Context, i int) error {
	db, err := c.rootDB(i)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Accounts are not written to the binary log, so binlogs start with data only.
	stmts := []string{
		"SET sql_log_bin = 0",
		"CREATE USER IF NOT EXISTS '" + ToolUser + "'@'%' IDENTIFIED BY '" + ToolPassword + "'",
		"GRANT ALL PRIVILEGES ON *.* TO '" + ToolUser + "'@'%' WITH GRANT OPTION",
		"CREATE USER IF NOT EXISTS '" + AppUser + "'@'%' IDENTIFIED BY '" + AppPassword + "'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON *.* TO '" + AppUser + "'@'%'",
	}
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("create sandbox accounts: %w", err)
		}
	}
	return nil
}

func (c Config) pid(i int) int {
	b, err := os.ReadFile(c.pidFile(i))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie still answers kill(0); read its state.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		if f := bytes.Fields(b); len(f) > 2 && string(f[2]) == "Z" {
			return false
		}
	}
	return true
}

func (c Config) status(ctx context.Context, i int) Server {
	s := Server{Index: i, Port: c.port(i), DataDir: filepath.Join(c.serverDir(i), "data"), ReplicaOf: c.SourceOf(i)}
	s.PID = c.pid(i)
	s.Running = alive(s.PID)
	if s.Running {
		s.Answers = c.ping(ctx, i)
	}
	return s
}

// Status reports each configured server as it really is (a killed server shows as not running).
func Status(ctx context.Context, c Config) ([]Server, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	out := make([]Server, 0, c.total())
	for i := 1; i <= c.total(); i++ {
		out = append(out, c.status(ctx, i))
	}
	return out, nil
}

// portTaken reports whether the error log, from byte from on, says the
// server could not bind its port (MariaDB and MySQL both write
// "Address already in use").
func portTaken(errorLog string, from int64) bool {
	f, err := os.Open(errorLog)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return false
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return bytes.Contains(b, []byte("Address already in use"))
}
