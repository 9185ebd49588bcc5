package cmd

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// A script passes --yes to every command that acts; the one that refused
// it (plan abort) broke such a script exactly when it had to abort. Every
// command that acts takes it: one with --dry-run, --apply, --fix,
// --repair or --plan-out, and every plan subcommand that runs or ends a plan.
func TestEveryCommandThatActsTakesYes(t *testing.T) {
	a := &app{v: viper.New()}
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() {
			return
		}
		acts := c.Parent() != nil && c.Parent().Name() == "plan" && !slices.Contains([]string{"list", "show", "watch"}, c.Name())
		for _, f := range []string{"dry-run", "apply", "fix", "repair", "plan-out"} {
			acts = acts || c.Flags().Lookup(f) != nil
		}
		if !acts {
			return
		}
		seen++
		f := c.Flags().Lookup("yes")
		if f == nil || f.Value.Type() != "bool" || f.Shorthand != "y" || c.Annotations[annAsks] == "" {
			t.Errorf("%s: acts but takes no --yes/-y (give it asks(c, &yes))", c.CommandPath())
			return
		}
		if err := c.ParseFlags([]string{"--yes"}); err != nil {
			t.Errorf("%s --yes: %v", c.CommandPath(), err)
		}
	}
	walk(a.rootCmd())
	if seen < 12 {
		t.Fatalf("only %d commands act: the walk missed the tree", seen)
	}
}

// plan abort PLAN --yes is parsed (it reached the plan lookup, not the flag parser).
func TestPlanAbortTakesYes(t *testing.T) {
	r := run(t, "--plan-dir", t.TempDir(), "plan", "abort", "no-such-plan", "--yes")
	if r.code != ExitBadInput || !strings.Contains(r.stderr, "no-such-plan") || strings.Contains(r.stderr, "unknown flag") {
		t.Fatalf("plan abort --yes: %d %s", r.code, r.stderr)
	}
}
