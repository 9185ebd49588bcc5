// Package hooks runs the operator's executables at the points of a plan's run
// (gh-ost's hooks are the model): plan-start, before-fence, after-cutover,
// after-cleanup, on-failure. A hook learns what is happening from
// SHARDCTL_* environment variables; it never sees a password. Each run is
// bounded by a timeout, and a hook that outlives it is killed with its children.
package hooks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shardctl/shardctl/plans"
)

// Runner runs the configured hooks.
type Runner struct {
	Paths   map[string][]string // hook point -> executables, run in order
	Timeout time.Duration       // per executable; 0: DefaultTimeout
	Output  io.Writer           // the hooks' stdout and stderr (nil: discarded)
	Log     *slog.Logger
}

// DefaultTimeout bounds a hook when no timeout is given.
const DefaultTimeout = 30 * time.Second

// Parse reads POINT=PATH into m, checking the point against points.
func Parse(m map[string][]string, spec string, points []string) error {
	point, path, ok := strings.Cut(spec, "=")
	if !ok || path == "" {
		return fmt.Errorf("hook %q: give POINT=PATH, POINT one of %s", spec, strings.Join(points, ", "))
	}
	if !slices.Contains(points, point) {
		return fmt.Errorf("hook %q: unknown point %q; use one of %s", spec, point, strings.Join(points, ", "))
	}
	m[point] = append(m[point], path)
	return nil
}

// Vars are the environment variables a hook gets for plan p at point.
func Vars(point string, p *plans.Plan, step string) []string {
	shard := strconv.Itoa(p.Source.ShardID)
	return []string{
		"SHARDCTL_HOOK_POINT=" + point,
		"SHARDCTL_PLAN_ID=" + p.ID,
		"SHARDCTL_OPERATION=" + p.Operation,
		"SHARDCTL_SHARD=" + shard,
		"SHARDCTL_SOURCE=" + p.Source.Addr() + "/" + p.Source.Schema,
		"SHARDCTL_TARGET=" + p.Target.Addr() + "/" + p.Target.Schema,
		"SHARDCTL_STEP=" + step,
		"SHARDCTL_PLAN_STATE=" + p.State,
	}
}

// environ is this process's environment without anything secret: a hook is
// someone else's program.
func environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.Contains(strings.ToUpper(k), "PASSWORD") || strings.HasPrefix(k, "SHARDCTL_") || k == "MYSQL_PWD" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Run runs point's hooks in order and returns the first failure.
func (r *Runner) Run(ctx context.Context, point string, p *plans.Plan, step string) error {
	if r == nil {
		return nil
	}
	for _, path := range r.Paths[point] {
		if err := r.one(ctx, path, point, p, step); err != nil {
			if r.Log != nil {
				r.Log.Warn("hook failed", "point", point, "hook", path, "plan", p.ID, "err", err)
			}
			return err
		}
	}
	return nil
}

func (r *Runner) one(ctx context.Context, path, point string, p *plans.Plan, step string) error {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = append(environ(), Vars(point, p, step)...)
	out := r.Output
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a timeout kills what the hook started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if r.Log != nil {
		r.Log.Info("hook ran", "point", point, "hook", path, "plan", p.ID, "took", time.Since(start).Round(time.Millisecond), "ok", err == nil)
	}
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s hook %s: killed after the %s hook timeout", point, path, timeout)
	}
	return fmt.Errorf("%s hook %s: %w", point, path, err)
}
