package cmd

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// eachFlag calls fn with every flag of every command of the tree.
func eachFlag(c *cobra.Command, fn func(c *cobra.Command, fl *pflag.Flag)) {
	seen := map[*pflag.Flag]bool{}
	visit := func(fl *pflag.Flag) {
		if !seen[fl] {
			seen[fl] = true
			fn(c, fl)
		}
	}
	c.Flags().VisitAll(visit)
	c.PersistentFlags().VisitAll(visit)
	for _, s := range c.Commands() {
		eachFlag(s, fn)
	}
}

// TestEveryFlagHasOneRule walks every command's flags through checkFlag: each
// number and duration flag has a rule, its default passes, a negative value
// and values outside the range are refused, 0 only where it means "off".
func TestEveryFlagHasOneRule(t *testing.T) {
	root := (&app{v: viper.New(), out: io.Discard, errOut: io.Discard}).rootCmd()
	used := map[string]bool{}
	try := func(c *cobra.Command, fl *pflag.Flag, v string) error {
		t.Helper()
		if err := fl.Value.Set(v); err != nil {
			t.Fatalf("%s --%s %s: %v", c.CommandPath(), fl.Name, v, err)
		}
		defer fl.Value.Set(fl.DefValue)
		return checkFlag(fl)
	}
	eachFlag(root, func(c *cobra.Command, fl *pflag.Flag) {
		where := c.CommandPath() + " --" + fl.Name
		if err := checkFlag(fl); err != nil {
			t.Errorf("%s: the default %q is refused: %v", where, fl.DefValue, err)
		}
		var l limit
		var ok bool
		var format func(float64) string
		switch fl.Value.Type() {
		case "duration":
			l, ok = durationFlags[fl.Name]
			format = fmtDuration
		case "int", "int64", "int32", "uint", "uint64", "float64":
			l, ok = numberFlags[fl.Name]
			format = fmtFloat
		default:
			return
		}
		if !ok {
			t.Errorf("%s (%s) has no rule in flagrules.go", where, fl.Value.Type())
			return
		}
		used[fl.Name] = true
		if l.lo == -unbounded {
			return
		}
		neg := "-1"
		if fl.Value.Type() == "duration" {
			neg = "-5m"
		}
		if err := try(c, fl, neg); err == nil || exitCode(err) != ExitBadInput {
			t.Errorf("%s %s: accepted (%v)", where, neg, err)
		}
		if err := try(c, fl, "0"); (err == nil) != (l.off != "" || l.lo == 0) {
			t.Errorf("%s 0: %v (off: %q)", where, err, l.off)
		}
		if l.hi != unbounded && fl.Value.Type() != "float64" {
			if err := try(c, fl, format(l.hi*2)); err == nil {
				t.Errorf("%s %s: accepted above %s", where, format(l.hi*2), format(l.hi))
			}
		}
	})
	for _, rules := range []map[string]limit{durationFlags, numberFlags} {
		for name := range rules {
			if !used[name] {
				t.Errorf("rule for --%s: no command has that flag", name)
			}
		}
	}
}

func fmtDuration(ns float64) string { return fmtFloat(ns) + "ns" }
func fmtFloat(v float64) string     { return strconv.FormatFloat(v, 'f', -1, 64) }

// TestOneValidationPath: the accepted values are refused with exit 2
// by every command that has the flag, from the command line, from
// SHARDCTL_* and from the config file alike, before any connection is made
// (the shard map address below does not answer).
func TestOneValidationPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Chdir(dir)
	base := []string{"--shardmap", "127.0.0.1:1/none", "--plan-dir", filepath.Join(dir, "plans")}
	long := strings.Repeat("s", 65)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"move", "--shard", "1", "--to", "127.0.0.1:3307", "--reverse-window", "-5m", "--yes"}, "--reverse-window -5m0s: allowed 0 (no window) or 1s"},
		{[]string{"move", "--shard", "1", "--to", "127.0.0.1:3307", "--reverse-window", "1ns", "--yes"}, "--reverse-window 1ns"},
		{[]string{"split", "--shard", "1", "--to", "127.0.0.1:3307", "--reverse-window", "500ms"}, "--reverse-window 500ms"},
		{[]string{"merge", "--shard", "1", "--into", "2", "--reverse-window", "-1s"}, "--reverse-window -1s"},
		{[]string{"split", "--shard", "1", "--to", "127.0.0.1:3307", "--schema", long, "--dry-run"}, "65 characters"},
		{[]string{"move", "--shard", "1", "--to", "host:port"}, "--to \"host:port\""},
		{[]string{"rebalance", "--max-shard-rows", "-5"}, "--max-shard-rows -5"},
		{[]string{"rebalance", "--max-shard-rows", "10", "--chunk-rows", "0"}, "--chunk-rows 0"},
		{[]string{"rebalance", "--max-shard-rows", "10", "--parallel", "0"}, "--parallel 0"},
		{[]string{"rebalance", "--max-shard-rows", "10", "--max-rate", "-1"}, "--max-rate -1"},
		{[]string{"rebalance", "--max-shard-rows", "10", "--rounds", "-1"}, "--rounds -1"},
		{[]string{"rebalance", "--max-shard-rows", "10", "--max-blackout", "0"}, "--max-blackout 0s"},
		{[]string{"rebalance", "--max-shard-rows", "10", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"rebalance", "--max-server-share", "1.5"}, "--max-server-share 1.5"},
		{[]string{"rebalance", "--drain", "host:0"}, "--drain \"host:0\""},
		{[]string{"plan", "resume", "x", "--max-blackout", "0"}, "--max-blackout 0s"},
		{[]string{"plan", "resume", "x", "--source", "host:port"}, "--source \"host:port\""},
		{[]string{"plan", "resume", "x", "--retry-for", "500ms"}, "--retry-for 500ms: allowed 0 (no retry) or 1s"},
		{[]string{"move", "--shard", "1", "--to", "127.0.0.1:3307", "--retry-for", "-1m", "--yes"}, "--retry-for -1m0s"},
		{[]string{"plan", "apply", "x", "--chunk-rows", "-3"}, "--chunk-rows -3"},
		{[]string{"prune", "--shard", "1", "--sleep-ms", "-1"}, "--sleep-ms -1"},
		{[]string{"verify", "--shard", "1", "--chunk-rows", "0"}, "--chunk-rows 0"},
		{[]string{"plan", "watch", "x", "--every", "1ms"}, "--every 1ms"},
		{[]string{"load", "--keys", "a=1-10", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"status", "--hook-timeout", "0s"}, "--hook-timeout 0s"},
	}
	for _, c := range cases {
		r := run(t, append(append([]string{}, base...), c.args...)...)
		if r.code != ExitBadInput || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 saying %q\n%s", c.args, r.code, c.want, r.stderr)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "plans", "*")); len(files) > 0 {
		t.Errorf("refused runs left plan files: %v", files)
	}
	// The same values from the environment and from the config file.
	t.Setenv("SHARDCTL_REVERSE_WINDOW", "-5m")
	if r := run(t, append(append([]string{}, base...), "move", "--shard", "1", "--to", "127.0.0.1:3307", "--yes")...); r.code != ExitBadInput || !strings.Contains(r.stderr, "--reverse-window -5m0s") {
		t.Errorf("SHARDCTL_REVERSE_WINDOW=-5m: exit %d\n%s", r.code, r.stderr)
	}
	os.Unsetenv("SHARDCTL_REVERSE_WINDOW")
	cfg := filepath.Join(dir, "shardctl.yaml")
	if err := os.WriteFile(cfg, []byte("max-blackout: 0s\nrounds: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, append(append([]string{"--config", cfg}, base...), "rebalance", "--max-shard-rows", "10")...); r.code != ExitBadInput || !strings.Contains(r.stderr, "--max-blackout 0s") {
		t.Errorf("config max-blackout: 0s: exit %d\n%s", r.code, r.stderr)
	}
	if r := run(t, append(append([]string{"--config", cfg}, base...), "plan", "resume", "x")...); r.code != ExitBadInput || !strings.Contains(r.stderr, "--max-blackout 0s") {
		t.Errorf("config max-blackout: 0s for plan resume: exit %d\n%s", r.code, r.stderr)
	}
}

// --metrics-addr is checked by its form with the other flags, so a dry run
// refuses what a run would (issue 53); [HOST]:PORT passes.
func TestMetricsAddrForm(t *testing.T) {
	for v, ok := range map[string]bool{"nonsense": false, "127.0.0.1:http": false, "host:99999": false, "a:b:c": false,
		":9100": true, "127.0.0.1:9100": true, "[::1]:0": true, "localhost:9100": true} {
		err := checkListenAddr("metrics-addr", v)
		if (err == nil) != ok {
			t.Errorf("--metrics-addr %q: %v, want accepted %v", v, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "give HOST:PORT or :PORT") {
			t.Errorf("--metrics-addr %q: %v does not say what to give", v, err)
		}
	}
}
