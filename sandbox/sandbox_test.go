package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/testenv"
	"github.com/shardctl/shardctl/sandbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestUpIsIdempotentAndStatusTellsTheTruth(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	srv, err := sandbox.Up(ctx, env.Config) // second Up: nothing to do
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srv {
		if !s.Running || !s.Answers {
			t.Fatalf("server %d not up after Up: %+v", s.Index, s)
		}
	}
	db := env.DB(t, 1, "")
	var format, image, serverID string
	var pool int64
	if err := db.QueryRow("SELECT @@binlog_format, @@binlog_row_image, @@server_id, @@innodb_buffer_pool_size").Scan(&format, &image, &serverID, &pool); err != nil {
		t.Fatal(err)
	}
	if format != "ROW" || image != "FULL" || serverID != "1" || pool != sandbox.DefaultBufferPoolMB<<20 {
		t.Fatalf("server settings: format=%s image=%s server_id=%s buffer pool=%d", format, image, serverID, pool)
	}
	var id2 string
	if err := env.DB(t, 2, "").QueryRow("SELECT @@server_id").Scan(&id2); err != nil || id2 != "2" {
		t.Fatalf("server 2 server_id=%q err=%v", id2, err)
	}

	// Kill server 3: status must say so, and Up must bring it back.
	if err := sandbox.Kill(env.Config, 3); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := sandbox.Status(ctx, env.Config)
		if !st[2].Running && !st[2].Answers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status still says server 3 runs after SIGKILL: %+v", st[2])
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv, err = sandbox.Up(ctx, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if !srv[2].Answers {
		t.Fatalf("server 3 not back: %+v", srv[2])
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []sandbox.Config{{Dir: "", Servers: 3, BasePort: 13306}, {Dir: "/x", Servers: 0, BasePort: 13306}, {Dir: "/x", Servers: 3, BasePort: 80}, {Dir: "/x", Servers: 1, BasePort: 13306, Flavor: "oracle"}, {Dir: "/x", Servers: 1, BasePort: 13306, BufferPoolMB: 8},
		{Dir: "/x", Servers: 1, BasePort: 13306, Version: "12.0"}, {Dir: "/x", Servers: 1, BasePort: 13306, Flavor: sandbox.FlavorMySQL, Version: sandbox.Version118}} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
}

// TestMySQLSurvivesADeletedLink: a /tmp cleanup that deletes DIR/s<i> while a
// MySQL server runs (its files live in the root) must not make Up start a
// second server on the same data: the server is found and the link restored.
func TestMySQLSurvivesADeletedLink(t *testing.T) {
	if !testenv.MySQL() {
		t.Skip("MySQL sandboxes only (MariaDB keeps its files in DIR)")
	}
	env := testenv.Get(t)
	ctx := context.Background()
	before, err := sandbox.Status(ctx, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(env.Config.Dir, "s3")
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	srv, err := sandbox.Up(ctx, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if s := srv[2]; !s.Running || !s.Answers || s.PID != before[2].PID {
		t.Fatalf("server 3 after the link was deleted: %+v, before %+v", s, before[2])
	}
}

// A server started with DieWithParent ends with the process that started
// it: a test binary killed by its timeout (it runs no cleanup) leaves no
// server running. The test runs itself as that process.
func TestServersDieWithTheTestBinary(t *testing.T) {
	ctx := context.Background()
	if dir := os.Getenv("SHARDCTL_TEST_ORPHAN_DIR"); dir != "" {
		port, _ := strconv.Atoi(os.Getenv("SHARDCTL_TEST_ORPHAN_PORT"))
		cfg := sandbox.Config{Dir: dir, Servers: 1, BasePort: port, Flavor: testenv.Flavor(), DieWithParent: true, Lean: true}
		if _, err := sandbox.Up(ctx, cfg); err != nil {
			fmt.Println("sandbox up:", err)
			os.Exit(2)
		}
		os.Exit(0) // no Down, as after a timeout
	}
	testenv.Get(t) // the servers' binaries are there (or the test fails or skips as every test does)
	port, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := sandbox.Config{Dir: dir, Servers: 1, BasePort: port, Flavor: testenv.Flavor()}
	t.Cleanup(func() { _ = sandbox.Down(context.Background(), cfg, true) })
	cmd := exec.Command(os.Args[0], "-test.run=^TestServersDieWithTheTestBinary$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SHARDCTL_TEST_ORPHAN_DIR="+dir, fmt.Sprintf("SHARDCTL_TEST_ORPHAN_PORT=%d", port))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the process that starts the server: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := sandbox.Status(ctx, cfg)
		if err == nil && !st[0].Running && !st[0].Answers {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still runs 10 s after the process that started it ended: %+v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A server whose port another process took after it was found free stops
// with ErrPortInUse as soon as its error log says so (testenv then starts
// the sandbox on other ports), not after the start-up limit: in CI a MySQL
// server waited 5 minutes on a port the other flavor's pass had taken.
func TestPortTakenFailsWithErrPortInUse(t *testing.T) {
	testenv.Get(t) // the servers can start here
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := sandbox.Config{Dir: t.TempDir(), Servers: 1, BasePort: l.Addr().(*net.TCPAddr).Port, Flavor: testenv.Flavor(), DieWithParent: true, Lean: true}
	t.Cleanup(func() { _ = sandbox.Down(context.Background(), cfg, true) })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	_, err = sandbox.Up(ctx, cfg)
	if !errors.Is(err, sandbox.ErrPortInUse) {
		t.Fatalf("Up on a taken port: %v, want ErrPortInUse", err)
	}
	// The failed server is gone when Up returns: left shutting down, it
	// wrote into the data directory a start on other ports filled again.
	arg := []byte(fmt.Sprintf("--port=%d\x00", cfg.BasePort))
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, arg) {
			t.Fatalf("a server of the failed start still runs: %s", bytes.ReplaceAll(b, []byte{0}, []byte(" ")))
		}
	}
}
