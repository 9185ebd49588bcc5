package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Down stops every server: SIGTERM to all of them, then SIGKILL to any
// still running after a grace period. With purge the servers are killed at
// once (a clean shutdown of data about to be deleted costs a MySQL server 2-4
// s) and their data directories removed.
func Down(ctx context.Context, c Config, purge bool) error {
	if err := c.Validate(); err != nil {
		return err
	}
	sig, grace := syscall.SIGTERM, 30*time.Second
	if purge {
		sig, grace = syscall.SIGKILL, 5*time.Second
	}
	pids := map[int]int{} // server index: pid
	for i := 1; i <= c.total(); i++ {
		if pid := c.pid(i); alive(pid) {
			_ = syscall.Kill(pid, sig)
			pids[i] = pid
		}
	}
	deadline := time.Now().Add(grace)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, pid := range pids {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(200 * time.Millisecond)
		}
	}
	for i := 1; i <= c.total(); i++ {
		_ = os.Remove(c.pidFile(i))
		if purge {
			if c.chrooted() {
				if err := c.purgeInRoot(i); err != nil {
					return err
				}
			}
			if err := os.RemoveAll(c.serverDir(i)); err != nil {
				return err
			}
		}
	}
	if purge {
		_ = os.Remove(filepath.Join(c.Dir, "flavor"))
		_ = os.Remove(filepath.Join(c.Dir, "replicas"))
		_ = os.Remove(c.Dir)
	}
	return nil
}

// Kill sends SIGKILL to server i (tests use it to check that Status tells the truth).
func Kill(c Config, i int) error {
	pid := c.pid(i)
	if !alive(pid) {
		return fmt.Errorf("sandbox server %d is not running", i)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}
