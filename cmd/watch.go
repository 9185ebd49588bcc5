package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
)

// planLoader reads the current state of a plan by ID or path. Plan files
// today; a plan store in the sharding database can stand in for it.
type planLoader interface {
	LoadPlan(ctx context.Context, ref string) (*plans.Plan, error)
}

// fleetLoader reads a plan from the plan directory and the sharding
// database's plans table (the later copy), so a plan run on another host can
// be watched; the store's pool is opened once for the whole watch.
type fleetLoader struct {
	dir   string
	store *planstore.Store
}

func (l fleetLoader) LoadPlan(ctx context.Context, ref string) (*plans.Plan, error) {
	p, _, err := planstore.Load(ctx, l.dir, l.store, ref)
	return p, err
}

// Running reports whether a process runs p (holds its shard locks); known
// is false without the sharding database.
func (l fleetLoader) Running(ctx context.Context, p *plans.Plan) (known, running bool) {
	if l.store == nil || len(p.Locks) == 0 {
		return false, false
	}
	running, err := lock.InUse(ctx, l.store.DB, p.Locks)
	return err == nil, running
}

// runChecker is a planLoader that can tell whether anyone runs a plan.
type runChecker interface {
	Running(ctx context.Context, p *plans.Plan) (known, running bool)
}

// unrunGrace is how long a plan's locks may stay free before watch says
// nobody runs it: a run saves its plan a moment before it takes them.
const unrunGrace = 5 * time.Second

func (a *app) planWatchCmd() *cobra.Command {
	var every time.Duration
	c := &cobra.Command{
		Use:   "watch PLAN",
		Short: "Follow a plan run by another process: the step view, refreshed every second, until the plan ends",
		Long: `watch shows the step view of a plan that another shardctl process runs (plan
ID or file), refreshed every second, and ends when the plan ends: exit 0 when it
is done, 3 when it stopped (resumable), 1 when it was aborted. Ctrl-C stops
watching (exit 0); the plan keeps running. Off a terminal it prints one line
per step change.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ps, closeFn := a.planStore(cmd.Context())
			defer closeFn()
			return a.watchPlan(cmd.Context(), fleetLoader{dir: a.planDir(), store: ps}, args[0], every)
		},
	}
	c.Flags().DurationVar(&every, "every", time.Second, "how often to read the plan")
	return c
}

// staleAfter is how long a running plan may go unsaved before watch says so.
const staleAfter = 30 * time.Second

// watchPlan follows plan ref until it ends or ctx is cancelled (Ctrl-C: not an error).
func (a *app) watchPlan(ctx context.Context, l planLoader, ref string, every time.Duration) error {
	p, err := l.LoadPlan(ctx, ref)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return badInput("no plan %q (see 'shardctl plan list')", ref)
		}
		return withCode(ExitBadInput, err)
	}
	m := newViewModel(p.Summary)
	watching := fmt.Sprintf("watching plan %s every %s; Ctrl-C stops watching (the plan keeps running)", p.ID, every)
	m.footer = watching
	var v *liveView
	if a.viewWanted() {
		v = newLiveView(os.Stdout, m)
		v.update(func(m *viewModel) { m.fromPlan(p, time.Now()) })
		v.start()
	}
	printed := map[string]string{}
	attempts := 0
	tick := time.NewTicker(every)
	defer tick.Stop()
	failures := 0
	var freeSince time.Time // when the plan's locks were first seen free
	for {
		if v != nil {
			v.update(func(m *viewModel) {
				m.fromPlan(p, time.Now())
				m.footer = watching
				if quiet := time.Since(p.UpdatedAt); p.State == plans.StateRunning && quiet > staleAfter {
					// A run saves its plan often; a long silence may be a process that died.
					m.footer = fmt.Sprintf("no change for %s: if the process running it is gone, continue it with 'shardctl plan resume %s'", quiet.Round(time.Second), p.ID)
				}
			})
		} else if !a.jsonOut() {
			attempts = printChanges(a.out, p, printed, attempts)
		}
		if p.State == plans.StateDone || p.State == plans.StateStopped || p.State == plans.StateAborted {
			break
		}
		if rc, ok := l.(runChecker); ok {
			if known, running := rc.Running(ctx, p); known && !running {
				if freeSince.IsZero() {
					freeSince = time.Now()
				} else if time.Since(freeSince) >= unrunGrace {
					break
				}
			} else {
				freeSince = time.Time{}
			}
		}
		select {
		case <-ctx.Done():
			if v != nil {
				v.update(func(m *viewModel) { m.footer = "stopped watching; the plan keeps running" })
				v.stop()
			}
			return nil
		case <-tick.C:
		}
		np, err := l.LoadPlan(ctx, ref)
		if err != nil {
			// A plan being rewritten or a store briefly away: try again, up to a point.
			if failures++; failures >= 30 {
				if v != nil {
					v.stop()
				}
				return fmt.Errorf("watch plan %s: %w", ref, err)
			}
			continue
		}
		failures, p = 0, np
	}
	if v != nil {
		v.update(func(m *viewModel) { m.footer = "" })
		v.stop()
	}
	var end error
	switch p.State {
	case plans.StateNew:
		end = withCode(ExitResumable, fmt.Errorf("plan %s is not running: no process holds its shard lock and it has not started; run it with 'shardctl plan apply %s'", p.ID, ref))
	case plans.StateRunning:
		end = withCode(ExitResumable, fmt.Errorf("plan %s is not running: no process holds its shard lock (the process that ran it is gone) and it stands at %s; continue it with 'shardctl plan resume %s'", p.ID, p.AtStep(), ref))
	case plans.StateStopped:
		end = withCode(ExitResumable, fmt.Errorf("plan %s stopped at %s; continue it with 'shardctl plan resume %s'", p.ID, p.AtStep(), p.ID))
	case plans.StateAborted:
		end = withCode(ExitFailed, fmt.Errorf("plan %s was aborted", p.ID))
	}
	if a.jsonOut() {
		if end != nil {
			return end // Run prints the error as the one JSON document
		}
		return a.emit(p, nil)
	}
	if end == nil {
		r := p.Result
		fmt.Fprintf(a.out, "%s: done\n  rows copied %d, binlog row changes applied %d, rows verified %d, source rows cleaned up %d\n  write blackout %.1f ms\n",
			p.Summary, r.RowsCopied, r.EventsApplied, r.RowsVerified, r.RowsDeleted, r.BlackoutMS)
	}
	return end
}

// printChanges writes a line per step whose state changed and per new cutover attempt (off a terminal).
func printChanges(w io.Writer, p *plans.Plan, printed map[string]string, attempts int) int {
	for _, s := range p.Steps {
		if printed[s.Name] == s.State {
			continue
		}
		printed[s.Name] = s.State
		line := fmt.Sprintf("%s %s", s.Name, s.State)
		if s.State == plans.Done && !s.Started.IsZero() {
			line += " in " + fmtDur(s.Ended.Sub(s.Started))
		}
		if s.Error != "" {
			line += ": " + s.Error
		}
		fmt.Fprintln(w, line)
	}
	for _, s := range p.Steps {
		key := s.Name + " throttled" // the running step's wait, printed as it starts and ends
		if s.State != plans.Running || printed[key] == s.Throttled {
			continue
		}
		if s.Throttled != "" {
			fmt.Fprintf(w, "%s waits: %s\n", s.Name, s.Throttled)
		} else {
			fmt.Fprintf(w, "%s goes on\n", s.Name)
		}
		printed[key] = s.Throttled
	}
	for ; attempts < len(p.Attempts); attempts++ {
		at := p.Attempts[attempts]
		if at.Result == "fencing" {
			break // not ended yet: print it when it has a result
		}
		fmt.Fprintf(w, "cutover attempt %d: %s (blackout %.1f ms)\n", attempts+1, at.Result, at.BlackoutM)
	}
	return attempts
}
