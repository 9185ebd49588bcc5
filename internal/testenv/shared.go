package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/shardctl/shardctl/sandbox"
)

// SharedEnv, set to a directory, has every test binary that calls Get use
// one sandbox there instead of starting its own: the first binary starts
// it, under a file lock, and leaves it running; the next ones find its
// config and use its servers. scripts/test.sh sets it for the packages it
// runs one binary at a time (go test -p 1), one directory per flavor, and
// stops the servers when they are done: 3 MySQL servers cost some 9.6 CPU-s
// to start (MariaDB's 2.1), and each of about 20 packages a flavor started
// its own. Each test still works in its own schemas and restores any
// global it sets; a package that leaves a server dead has it started again
// by the next Get. Only binaries that run one after another may share (a
// test of one package may stall or kill a server another's test uses).
const SharedEnv = "SHARDCTL_TEST_SHARED_SANDBOX"

// sharedConfig is the file in the shared directory that names the running sandbox.
const sharedConfig = "sandbox.json"

// shared reports whether this binary's sandbox is the shared one.
func shared() bool { return os.Getenv(SharedEnv) != "" }

// upShared returns the shared sandbox of n servers in dir, started if no
// binary started it yet (or started again where a server no longer runs).
func upShared(ctx context.Context, dir string, n int) (sandbox.Config, []sandbox.Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sandbox.Config{}, nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return sandbox.Config{}, nil, err
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return sandbox.Config{}, nil, fmt.Errorf("lock the shared sandbox %s: %w", dir, err)
	}
	path := filepath.Join(dir, sharedConfig)
	if b, err := os.ReadFile(path); err == nil {
		var cfg sandbox.Config
		if err := json.Unmarshal(b, &cfg); err != nil {
			return cfg, nil, fmt.Errorf("the shared sandbox's %s: %w", path, err)
		}
		if cfg.Flavor != Flavor() {
			return cfg, nil, fmt.Errorf("the shared sandbox in %s runs %s, this pass %s: give each flavor its own %s", dir, cfg.Flavor, Flavor(), SharedEnv)
		}
		srv, err := sandbox.Up(ctx, cfg) // starts only what does not run
		return cfg, srv, err
	}
	cfg, srv, err := UpOnFreePorts(ctx, n, func(port int) sandbox.Config {
		// Not DieWithParent: the servers outlive this binary, for the next.
		return sandbox.Config{Dir: dir, Servers: n, BasePort: port, Flavor: Flavor(), Version: Version(), Lean: true}
	})
	if err != nil {
		return cfg, srv, err
	}
	b, err := json.Marshal(cfg)
	if err == nil {
		err = os.WriteFile(path+".tmp", b, 0o644)
	}
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		_ = sandbox.Down(context.Background(), cfg, true)
		return cfg, nil, fmt.Errorf("save the shared sandbox's config: %w", err)
	}
	return cfg, srv, nil
}
