package cmd

// Input checks that run before anything else: every flag within its allowed
// range, config discovery that reads only config files, one JSON document
// with -o json whatever happens, and exit 2 for every usage error.

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/plans"
)

// validate checks the operation flags; the message names the allowed range.
func (f *opFlags) validate(c *cobra.Command) error {
	// Ranges and addresses: checkFlags (flagrules.go), before any command runs.
	if why := f.options().Problem(); why != "" {
		return badInput("%s", why)
	}
	if c != nil && f.dryRun && f.planOut != "" {
		return badInput("give --dry-run or --plan-out, not both")
	}
	if f.planOut != "" {
		if _, err := os.Stat(f.planOut); err == nil {
			return badInput("--plan-out %s exists: a plan file is never overwritten; choose another name (or 'shardctl plan abort' the plan in it)", f.planOut)
		}
	}
	return nil
}

// outputJSON pre-scans the command line for -o json, so even a flag error or
// an unknown command prints one JSON document.
func outputJSON(args []string) bool {
	if os.Getenv("SHARDCTL_OUTPUT") == "json" {
		return true
	}
	for i, a := range args {
		if a == "--" {
			break
		}
		switch {
		case a == "-ojson" || a == "--output=json" || a == "-o=json":
			return true
		case (a == "-o" || a == "--output") && i+1 < len(args) && args[i+1] == "json":
			return true
		}
	}
	return false
}

// findConfig returns the first shardctl.yaml or shardctl.yml in the current
// directory or ~/.config/shardctl. Only those names: a bare ./shardctl is
// usually the binary itself.
func findConfig() string {
	dirs := []string{"."}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".config", "shardctl"))
	}
	for _, d := range dirs {
		for _, n := range []string{"shardctl.yaml", "shardctl.yml"} {
			p := filepath.Join(d, n)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p
			}
		}
	}
	return ""
}

// refuseUnknownSub makes a grouping command (plan, shardmap, …) refuse an
// unknown subcommand with exit 2 instead of printing help and exiting 0.
func refuseUnknownSub(c *cobra.Command) *cobra.Command {
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		var subs []string
		for _, s := range cmd.Commands() {
			if s.IsAvailableCommand() {
				subs = append(subs, s.Name())
			}
		}
		if len(args) == 0 {
			return badInput("%s needs a subcommand: %s (see '%s --help')", cmd.CommandPath(), strings.Join(subs, ", "), cmd.CommandPath())
		}
		return badInput("unknown subcommand %q for %s: use one of %s", args[0], cmd.CommandPath(), strings.Join(subs, ", "))
	}
	return c
}

// noPasswordInDSN refuses a password given in --shardmap: passwords never
// come from the command line (they would show in ps and shell history).
func noPasswordInDSN(raw string) error {
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return nil
	}
	if strings.Contains(raw[:at], ":") {
		return badInput("--shardmap carries a password: passwords never come from the command line; set SHARDCTL_PASSWORD or password: in shardctl.yaml and give USER@tcp(HOST:PORT)/SCHEMA or HOST:PORT/SCHEMA")
	}
	return nil
}

// override validates the settings given to 'plan apply' or 'plan resume'
// (plans.Settings with OnRun) and writes them into the plan (saved by the run).
func (f *opFlags) override(c *cobra.Command, p *plans.Plan) error {
	if err := f.validate(nil); err != nil {
		return err
	}
	o := f.options()
	for _, s := range plans.Settings {
		if s.OnRun && c.Flags().Changed(s.Flag) {
			s.Copy(&p.Options, &o)
		}
	}
	if why := p.Options.Problem(); why != "" {
		return badInput("%s", why)
	}
	return nil
}
