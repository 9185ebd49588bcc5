// Package fault lets tests kill the process at a named point, the way a
// crash or kill -9 would: SHARDCTL_FAULT=after:copy stops the process right
// after the copy step was saved. Unset in production, it does nothing.
//
// SHARDCTL_FAULT=hold:POINT instead holds the process at the point while the
// file named by SHARDCTL_FAULT_HOLD exists (at most two minutes), after
// creating FILE.held: a test restarts a server there, then deletes FILE.
//
// Several faults separated by commas apply together (planstore:put,after:copy:
// a run whose plans-table writes fail, killed after the copy).
package fault

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Env is the variable naming the fault point.
const Env = "SHARDCTL_FAULT"

// HoldEnv names the file a hold:POINT fault waits on.
const HoldEnv = "SHARDCTL_FAULT_HOLD"

// Hit kills the process with SIGKILL if point is the configured fault point,
// or holds it there if the fault is hold:point.
func Hit(point string) {
	v := points()
	if v == nil {
		return
	}
	if slices.Contains(v, "hold:"+point) {
		hold()
		return
	}
	if slices.Contains(v, point) {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; wait for it
	}
}

func hold() {
	f := os.Getenv(HoldEnv)
	if f == "" {
		return
	}
	_ = os.WriteFile(f+".held", nil, 0o644)
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(f); err != nil {
			return
		}
	}
}

// On reports whether point is the configured fault point, for faults that
// fail an operation instead of killing the process.
func On(point string) bool { return slices.Contains(points(), point) }

// points lists the configured fault points (nil: none).
func points() []string {
	v := os.Getenv(Env)
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}
