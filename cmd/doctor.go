package cmd

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/doctor"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/shardmap"
)

// doctorReport is what 'shardctl doctor' prints (-o json: this document).
type doctorReport struct {
	Healthy  bool             `json:"healthy"` // nothing left half-finished (after --fix: nothing left unfixed)
	Found    int              `json:"found"`   // half-finished states (info findings apart)
	Fixed    int              `json:"fixed"`
	Info     int              `json:"info"` // findings that are not half-finished (a free lock's row)
	Findings []doctor.Finding `json:"findings"`
}

func (a *app) doctorCmd() *cobra.Command {
	var fix, yes bool
	var staleLock time.Duration
	c := &cobra.Command{
		Use:   "doctor [--fix]",
		Short: "Find half-finished states anywhere in the fleet, and the command that ends each",
		Long: `doctor reads the shard map, every server it names, the plan directory, the
plans table and the locks, and lists every state a fault left half-finished:
plans stopped with no process running them, reverse windows past their end,
fence triggers and offline mappings no plan owns, copies no location names,
locks of dead holders, plan files that disagree with their plans-table row.
Each comes with the command that ends it. --fix does those that cannot lose
data and leaves the rest.

Exit codes: 0 nothing half-finished (after --fix: nothing left), 1 something
found (and left), 2 the sharding database could not be read.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(s *shardmap.Store) error {
				ctx := cmd.Context()
				env := doctor.Env{Store: s, Plans: planstore.New(s.DB, s.Schema), PlanDir: a.planDir(), Creds: a.shardCreds(), StaleLock: staleLock}
				facts, err := doctor.Read(ctx, env)
				if err != nil {
					return withCode(ExitBadInput, fmt.Errorf("doctor: %w", err))
				}
				fs := doctor.Classify(facts)
				if fix {
					doctor.Fix(ctx, env, fs)
				}
				rep := doctorReport{Findings: fs}
				for _, f := range fs {
					switch {
					case f.Info:
						rep.Info++
					case f.Fixed:
						rep.Found++
						rep.Fixed++
					default:
						rep.Found++
					}
				}
				rep.Healthy = rep.Fixed == rep.Found
				if rep.Findings == nil {
					rep.Findings = []doctor.Finding{}
				}
				if err := a.emit(rep, func(w io.Writer) { printDoctor(w, rep, fix) }); err != nil {
					return err
				}
				if !rep.Healthy {
					return withCode(ExitFailed, fmt.Errorf("doctor: %d half-finished state(s) left; each line above names the command that ends it", rep.Found-rep.Fixed))
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&fix, "fix", false, "end the states that cannot lose data (fences and offline mappings no plan owns, dead locks, plan copies that disagree)")
	asks(c, &yes) // --fix ends only what cannot lose data: nothing to ask
	c.Flags().DurationVar(&staleLock, "stale-lock", doctor.DefaultStaleLock, "a lock whose session sat idle this long belongs to a process that is gone")
	return c
}

func printDoctor(w io.Writer, rep doctorReport, fix bool) {
	for _, f := range rep.Findings {
		if f.Info {
			fmt.Fprintf(w, "info: %s: %s\n", f.Kind, f.What)
		} else {
			fmt.Fprintf(w, "%s: %s\n", f.Kind, f.What)
		}
		switch {
		case f.Info && !f.Fixed:
		case f.Fixed:
			fmt.Fprintln(w, "  fixed")
		case f.FixError != "":
			fmt.Fprintf(w, "  fix failed: %s\n  end it: %s\n", f.FixError, f.Command)
		default:
			fmt.Fprintf(w, "  end it: %s\n", f.Command)
			if f.Alternative != "" {
				fmt.Fprintf(w, "  or: %s\n", f.Alternative)
			}
		}
	}
	if rep.Found == 0 {
		fmt.Fprintln(w, "nothing half-finished")
		return
	}
	if fix {
		fmt.Fprintf(w, "%d half-finished state(s) found, %d fixed, %d left\n", rep.Found, rep.Fixed, rep.Found-rep.Fixed)
	} else {
		fmt.Fprintf(w, "%d half-finished state(s) found\n", rep.Found)
	}
}
