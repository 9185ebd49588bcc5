package cmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Hooks come from the config (a path or a list per point) and --hook; a
// wrong point, a missing executable or a bad rebalance policy is exit 2
// before anything is touched.
func TestFleetConfigAndFlags(t *testing.T) {
	dir := t.TempDir()
	hook := filepath.Join(dir, "hook.sh")
	os.WriteFile(hook, []byte("#!/bin/sh\nexit 0\n"), 0o755)
	n := 0
	cfg := func(body string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("shardctl-%d.yaml", n))
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	ok := cfg("hooks:\n  before-fence: " + hook + "\n  after-cutover:\n    - " + hook + "\n    - " + hook + "\n")
	if r := run(t, "--config", ok, "--hook", "on-failure="+hook, "version"); r.code != 0 {
		t.Fatalf("good hooks refused: %d %s", r.code, r.stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", cfg("hooks:\n  before-cutover: " + hook + "\n")}, "unknown point"},
		{[]string{"--config", cfg("hooks:\n  after-cleanup: " + filepath.Join(dir, "missing") + "\n")}, "not an executable"},
		{[]string{"--hook", "after-cleanup"}, "POINT=PATH"},
		{[]string{"--hook-timeout", "0s"}, "hook-timeout"},
	} {
		r := run(t, append(c.args, "version")...)
		if r.code != ExitBadInput || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, %s (want %q)", c.args, r.code, r.stderr, c.want)
		}
	}
	for _, args := range [][]string{
		{"rebalance"},
		{"rebalance", "--max-server-share", "1.5"},
		{"rebalance", "--max-shard-rows", "10", "--min-shard-rows", "10"},
		{"rebalance", "--max-shard-rows", "10", "--apply", "--dry-run"},
		{"rebalance", "--max-shard-rows", "10", "--concurrency", "0"},
		{"rebalance", "--max-shard-rows", "10", "--plan-out", "x.json"},
	} {
		if r := run(t, args...); r.code != ExitBadInput {
			t.Errorf("%v: exit %d, want 2: %s", args, r.code, r.stderr)
		}
	}
}
