package cmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// windowCmds are 'plan revert' and 'plan complete': requests to the process
// running a plan's reverse window (or, with none running, carried out here).
func (a *app) windowCmds() []*cobra.Command {
	mk := func(action, short, long string) *cobra.Command {
		var wait time.Duration
		var yes bool
		c := &cobra.Command{
			Use: action + " PLAN", Short: short, Long: long, Args: argsUsage(cobra.ExactArgs(1)),
			RunE: func(cmd *cobra.Command, args []string) error {
				path := plans.Resolve(a.planDir(), args[0])
				if _, err := os.Stat(path); err != nil {
					return badInput("no plan %q (looked for %s; see 'shardctl plan list')", args[0], path)
				}
				if err := a.confirm(yes, nil, action+" plan "+args[0]+"?"); err != nil {
					return err
				}
				return a.withStore(cmd, func(s *shardmap.Store) error {
					p, err := pipeline.RequestWindow(cmd.Context(), a.env(s), path, action, wait)
					if err != nil {
						if errors.Is(err, window.ErrNotNow) {
							return withCode(ExitResumable, err)
						}
						return a.opError(err, nil)
					}
					out := map[string]any{"plan_id": p.ID, "state": p.State, "window": p.Window}
					return a.emit(out, func(w io.Writer) {
						switch {
						case action == window.ActionRevert:
							n := len(p.Window.Switches)
							fmt.Fprintf(w, "plan %s: switched; the %s serves", p.ID, p.Window.Serving)
							if n > 0 {
								fmt.Fprintf(w, " (write blackout %.1f ms)", p.Window.Switches[n-1].BlackoutMS)
							}
							fmt.Fprintln(w)
						case p.State == plans.StateAborted:
							fmt.Fprintf(w, "plan %s completed: the source serves, %s; the plan ends aborted\n", p.ID, copyRemoved(p))
						default:
							fmt.Fprintf(w, "plan %s completed: the target serves, the source copy is cleaned up\n", p.ID)
						}
					})
				})
			},
		}
		c.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the process running the window")
		asks(c, &yes)
		return c
	}
	return []*cobra.Command{
		mk(window.ActionRevert, "Inside a reverse window: switch the shard map to the other copy",
			`revert switches a plan inside its reverse window (made with --reverse-window) to
the other copy with the cutover's machinery: mappings offline, fence on the
serving side, final catch-up, shard map switched, online. Running it again
switches forward again. Exit 3 when the switch did not fit the blackout budget
(the serving side keeps serving).`),
		mk(window.ActionComplete, "End a reverse window: stop the reverse tail and clean up the copy that does not serve",
			`complete ends a plan's reverse window: the tail stops and the cleanup runs. If
the target serves, the source copy is deleted as after any move; if the source
serves (reverted), the target copy is dropped and the plan ends aborted.`),
	}
}

// WindowStatus is a plan inside its reverse window, for 'status'.
type WindowStatus struct {
	PlanID  string `json:"plan_id"`
	Summary string `json:"summary"`
	*plans.WindowInfo
}

// windows lists the plans inside a reverse window.
func (a *app) windows() []WindowStatus {
	es, err := plans.List(a.planDir())
	if err != nil {
		return nil
	}
	var out []WindowStatus
	for _, e := range es {
		if e.Window != nil && e.Window.Active {
			out = append(out, WindowStatus{PlanID: e.ID, Summary: e.Summary, WindowInfo: e.Window})
		}
	}
	return out
}

func printWindows(w io.Writer, ws []WindowStatus) {
	for _, x := range ws {
		fmt.Fprintf(w, "reverse window: plan %s (%s): the %s serves, tail lag %.0f ms, ends %s; 'shardctl plan revert|complete %s'\n",
			x.PlanID, x.Summary, x.Serving, x.LagMS, x.Until.Format(time.RFC3339), x.PlanID)
	}
}

// windowNote is a plan list's mention of an open window.
func windowNote(w *plans.WindowInfo) string {
	if w == nil || !w.Active {
		return ""
	}
	return fmt.Sprintf("  [reverse window: the %s serves, until %s]", w.Serving, w.Until.Format(time.RFC3339))
}
