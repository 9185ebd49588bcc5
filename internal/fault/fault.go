// Package fault lets tests kill the process at a named point, the way a
// crash or kill -9 would: SHARDCTL_FAULT=after:copy stops the process right
// after the copy step was saved. Unset in production, it does nothing.
package fault

import (
	"os"
	"syscall"
)

// Env is the variable naming the fault point.
const Env = "SHARDCTL_FAULT"

// Hit kills the process with SIGKILL if point is the configured fault point.
func Hit(point string) {
	if v := os.Getenv(Env); v != "" && v == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; wait for it
	}
}

// On reports whether point is the configured fault point, for faults that
// fail an operation instead of killing the process.
func On(point string) bool { return os.Getenv(Env) == point }
