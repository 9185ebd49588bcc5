package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/move"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

// planDir is where plan files live.
func (a *app) planDir() string {
	if d := a.v.GetString("plan-dir"); d != "" {
		return d
	}
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "shardctl", "plans")
}

// opFlags are the flags every operation (move, split, merge, rebalance)
// shares: what to do with the plan, and the settings of plans.Settings.
type opFlags struct {
	dryRun, yes, keepSource bool
	planOut                 string
	vals                    map[string]any // a setting's flag name -> the flag's variable
}

func (f *opFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan (steps, tables, estimates, shard-map SQL) and change nothing")
	fl.StringVar(&f.planOut, "plan-out", "", "write the plan to FILE without running it ('shardctl plan apply FILE' runs it)")
	asks(c, &f.yes)
	f.registerSettings(c, false)
}

// annAsks marks a command that takes --yes.
const annAsks = "asks"

// asks gives c the --yes flag. Every command that can ask for confirmation,
// or that changes the fleet, a plan or the map when a script runs it, takes
// it, so a script can pass --yes to all of them (cmd's
// TestEveryCommandThatActsTakesYes walks the tree).
func asks(c *cobra.Command, yes *bool) {
	c.Flags().BoolVarP(yes, "yes", "y", false, "do not ask for confirmation on a terminal")
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[annAsks] = "true"
}

// confirm asks on a terminal before an act that changes the fleet, after
// show prints what it does; --yes, -o json or no terminal go ahead.
func (a *app) confirm(yes bool, show func(io.Writer), question string) error {
	if yes || !isTerminal() || a.jsonOut() {
		return nil
	}
	if show != nil {
		show(a.errOut)
	}
	fmt.Fprintf(a.errOut, "\n%s [y/N] ", question)
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if !strings.EqualFold(strings.TrimSpace(line), "y") && !strings.EqualFold(strings.TrimSpace(line), "yes") {
		return badInput("not confirmed; nothing was changed")
	}
	return nil
}

func (a *app) env(s *shardmap.Store) pipeline.Env {
	env := pipeline.Env{Store: s, Creds: a.shardCreds(), Log: a.log, Observer: a.runObserver()}
	a.addFleet(&env, s)
	return env
}

func (a *app) moveCmd() *cobra.Command {
	var f opFlags
	var shard, into int
	var to, keyRange, schema string
	var keys []string
	var shared bool
	c := &cobra.Command{
		Use:   "move --shard ID --to HOST:PORT | move --shard ID --keys K1,K2|--range LO:HI --into ID|--to HOST:PORT",
		Short: "Move a whole shard, or some of its keys (tenants, a sub-range), online",
		Long: `move copies a shard's schema to another server while the application keeps
writing: snapshot copy in primary-key chunks, binlog tail, checksums, then a
short fence of the shard's writes while the shard map is switched to the new
server, and finally chunked deletes and a drop of the source copy.

With --keys (LIST points, one tenant each; on a RANGE map a key K is the
range [K, K+1)) or --range LO:HI (a sub-range of a RANGE mapping, LO
included, HI excluded), only those keys move with their rows: into an
existing shard on any server (--into ID), or to a new shard of their own
(--to HOST:PORT, "isolate a tenant"). Every other key of both shards stays
writable throughout, cutover included. A new shard of --keys --to is marked
dedicated at cutover (rebalance moves no key into or out of it; see
'shardctl shardmap set-policy'); --no-dedicated leaves it shared.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			if shard <= 0 {
				return badInput("give --shard ID (see 'shardctl shardmap show')")
			}
			if len(keys) > 0 || keyRange != "" || into != 0 {
				req := move.KeysRequest{ShardID: shard, Keys: keys, Range: keyRange, Into: into, Schema: schema, Shared: shared}
				switch {
				case len(keys) == 0 && keyRange == "":
					return badInput("--into moves some keys of a shard: give them with --keys K1,K2 or --range LO:HI (a whole shard moves with --to HOST:PORT)")
				case len(keys) > 0 && keyRange != "":
					return badInput("give --keys or --range, not both")
				case into < 0:
					return badInput("--into: give an existing shard id (see 'shardctl shardmap show')")
				case (into > 0) == (to != ""):
					return badInput("give where the keys go: --into ID (an existing shard) or --to HOST:PORT (a new shard), one of them")
				case f.keepSource:
					return badInput("--keep-source is for a whole-shard move; a key move deletes only the moved keys' rows from the source")
				case shared && to == "":
					return badInput("--no-dedicated is for the new shard of --keys ... --to HOST:PORT; an existing shard's policy is set with 'shardctl shardmap set-policy'")
				}
				if to != "" {
					addr, err := dbutil.ParseAddr(to)
					if err != nil {
						return badInput("--to: %v", err)
					}
					req.To = addr
				}
				return a.planAndLaunch(cmd, &f, func(ctx context.Context, env pipeline.Env, o plans.Options) (*plans.Plan, error) {
					req.Options = o
					return move.PlanKeys(ctx, env, req)
				})
			}
			if schema != "" {
				return badInput("--schema names a new shard's schema: it goes with --keys or --range and --to")
			}
			if shared {
				return badInput("--no-dedicated is for the new shard of --keys ... --to HOST:PORT; a whole-shard move keeps the shard's policy")
			}
			addr, err := dbutil.ParseAddr(to)
			if err != nil {
				return badInput("--to: %v", err)
			}
			return a.planAndLaunch(cmd, &f, func(ctx context.Context, env pipeline.Env, o plans.Options) (*plans.Plan, error) {
				return move.Plan(ctx, env, move.Request{ShardID: shard, To: addr, KeepSource: f.keepSource, Options: o})
			})
		},
	}
	f.register(c)
	c.Flags().IntVar(&shard, "shard", 0, "shard id to move")
	c.Flags().StringVar(&to, "to", "", "target server HOST:PORT (with --keys or --range: the server of a new shard for those keys)")
	c.Flags().StringSliceVar(&keys, "keys", nil, "move only these keys with their rows: LIST points (tenants), or RANGE keys K as [K, K+1)")
	c.Flags().StringVar(&keyRange, "range", "", "move only the sub-range LO:HI of a RANGE mapping (LO included, HI excluded)")
	c.Flags().IntVar(&into, "into", 0, "with --keys or --range: the existing shard that receives the keys (any server)")
	c.Flags().StringVar(&schema, "schema", "", "with --keys or --range and --to: the new shard's schema (default <source schema>_<first key>)")
	c.Flags().BoolVar(&shared, "no-dedicated", false, "with --keys or --range and --to: leave the new shard shared (default: dedicated, so rebalance leaves it alone)")
	c.Flags().BoolVar(&f.keepSource, "keep-source", false, "leave the source copy (fenced) for a manual check instead of deleting it")
	return c
}

// planAndLaunch builds an operation's plan with the flags' settings (build)
// and prints, saves or runs it.
func (a *app) planAndLaunch(cmd *cobra.Command, f *opFlags, build func(context.Context, pipeline.Env, plans.Options) (*plans.Plan, error)) error {
	return a.withStore(cmd, func(s *shardmap.Store) error {
		env := a.env(s)
		p, err := build(cmd.Context(), env, f.options())
		if err != nil {
			return a.opError(err, nil)
		}
		return a.launch(cmd, env, p, f)
	})
}

// launch prints, saves or runs a freshly built plan.
func (a *app) launch(cmd *cobra.Command, env pipeline.Env, p *plans.Plan, f *opFlags) error {
	if f.dryRun {
		return a.emit(p, func(w io.Writer) {
			plans.Print(w, p)
			fmt.Fprintln(w, "\ndry run: nothing was changed")
		})
	}
	if f.planOut != "" {
		if err := saveNewPlan(f.planOut, "--plan-out "+f.planOut, p); err != nil {
			return err
		}
		return a.emit(map[string]string{"plan_id": p.ID, "plan_path": f.planOut}, func(w io.Writer) {
			fmt.Fprintf(w, "plan %s written to %s; review it with 'shardctl plan show %s' and run it with 'shardctl plan apply %s'\n", p.ID, f.planOut, f.planOut, f.planOut)
		})
	}
	if err := a.confirm(f.yes, func(w io.Writer) { plans.Print(w, p) }, "proceed with "+p.Summary+"?"); err != nil {
		return err
	}
	// Outputs that can refuse the run are opened before the plan is saved.
	if _, err := a.metricsSink(); err != nil {
		return err
	}
	path := plans.Path(a.planDir(), p.ID)
	if err := saveNewPlan(path, "the plan directory "+a.planDir()+" (--plan-dir, SHARDCTL_PLAN_DIR or plan-dir: in the config file)", p); err != nil {
		return err
	}
	return a.runPlan(cmd.Context(), env, p, path, true)
}

// saveNewPlan writes a plan that has not run yet. A place shardctl cannot
// write is the operator's to fix (exit 2, not a failure a resume could
// cure): nothing was changed yet.
func saveNewPlan(path, where string, p *plans.Plan) error {
	if err := plans.Save(path, p); err != nil {
		return withCode(ExitBadInput, fmt.Errorf("%s is not usable: %w; give a directory shardctl can create and write in (nothing was changed)", where, err))
	}
	return nil
}

// runPlan runs (or resumes) a plan and reports it. A fresh plan (its first
// run, saved by this process) refused before it changed anything is removed.
func (a *app) runPlan(ctx context.Context, env pipeline.Env, p *plans.Plan, path string, fresh bool) error {
	env.PlanPath = path
	endView := a.startView(env.Observer, p)
	a.log.Info("running plan", "plan", p.ID, "file", path)
	obs := env.Observer
	env, recorded, err := a.withMetrics(env, p)
	if err != nil {
		endView(err)
		return err
	}
	err = pipeline.RunRetrying(ctx, env, p)
	recorded()
	endView(err)
	if o, ok := obs.(*observer); ok {
		o.finish()
	}
	summary := map[string]any{"plan_id": p.ID, "plan_path": path, "operation": p.Operation, "state": p.State, "result": p.Result, "steps": p.Steps, "cutover_attempts": p.Attempts}
	if fresh && pipeline.DiscardRefused(env.Store, p, path, err, a.log) {
		return a.opError(fmt.Errorf("%w (nothing was changed and no plan was kept)", err), nil)
	}
	if err != nil {
		ref := p.ID
		if filepath.Clean(path) != filepath.Clean(plans.Path(a.planDir(), p.ID)) {
			ref = path // outside the plan directory: the id alone would not find it
			err = &refError{err: err, id: p.ID, ref: ref}
		}
		// Another process running the plan is no stop of it: the error says so.
		if !a.jsonOut() && p.State != plans.StateNew && !errors.Is(err, lock.ErrBusy) {
			fmt.Fprintf(a.errOut, "plan %s stopped at %s; it is saved in %s\n", p.ID, p.AtStep(), path)
			switch {
			case p.State != plans.StateStopped, errors.Is(err, pipeline.ErrRefused), errors.Is(err, pipeline.ErrPurged):
			case errors.Is(err, binlog.ErrDDL):
				// A plain resume stops at the statement again: the error says the way out.
			case isDeterministic(err):
				fmt.Fprintf(a.errOut, "once the cause above is fixed, continue it with: shardctl plan resume %s   (or undo it: shardctl plan abort %s)\n", ref, ref)
			default:
				fmt.Fprintf(a.errOut, "continue it with: shardctl plan resume %s   (or undo it: shardctl plan abort %s)\n", ref, ref)
			}
		}
		return a.opError(err, p)
	}
	return a.emit(summary, func(w io.Writer) {
		r := p.Result
		if p.State == plans.StateAborted {
			fmt.Fprintf(w, "%s: reverted inside its window; %s, the plan ends aborted\n", p.Summary, copyRemoved(p))
		} else {
			fmt.Fprintf(w, "%s: done\n", p.Summary)
		}
		fmt.Fprintf(w, "  rows copied %d, binlog row changes applied %d, rows verified %d, source rows cleaned up %d\n", r.RowsCopied, r.EventsApplied, r.RowsVerified, r.RowsDeleted)
		fmt.Fprintf(w, "  write blackout %.1f ms; plan %s\n", r.BlackoutMS, path)
	})
}

// planCmd is the plan command and its subcommands. Long on purpose: each
// subcommand is a short declaration, and they read best side by side.
func (a *app) planCmd() *cobra.Command {
	c := &cobra.Command{Use: "plan", Short: "List, show, apply, resume and abort plan files"}
	loadPlan := func(ref string) (*plans.Plan, string, error) {
		p, path, err := a.findPlan(context.Background(), ref) // the plan directory and the sharding database (cmd/fleet.go)
		if err != nil {
			return nil, path, err
		}
		if path == plans.Path(a.planDir(), ref) && p.ID != ref {
			return nil, path, badInput("%s holds plan %s, not plan %s: give the file's path to work on the plan in it", path, p.ID, ref)
		}
		return p, path, nil
	}
	list := &cobra.Command{
		Use: "list", Short: "List plan files, newest first", Args: argsUsage(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			es, err := a.listPlans(context.Background())
			if err != nil {
				return err
			}
			return a.emit(es, func(w io.Writer) {
				if len(es) == 0 {
					fmt.Fprintf(w, "no plans in %s\n", a.planDir())
				}
				for _, e := range es {
					if e.Error != "" {
						fmt.Fprintf(w, "%s  DAMAGED: %s\n", e.ID, e.Error)
						continue
					}
					fmt.Fprintf(w, "%s  %-8s next: %-10s %s%s\n", e.ID, e.State, orNone(e.Step), e.Summary, windowNote(e.Window))
				}
			})
		},
	}
	show := &cobra.Command{
		Use: "show PLAN", Short: "Print a plan: steps, tables, checkpoints, shard-map SQL", Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			p, _, err := loadPlan(args[0])
			if err != nil {
				return err
			}
			return a.emit(p, func(w io.Writer) { plans.Print(w, p) })
		},
	}
	run := func(use, short string, wantNew bool) *cobra.Command {
		var f opFlags
		var newSource string
		c := &cobra.Command{
			Use: use + " PLAN", Short: short, Args: argsUsage(cobra.ExactArgs(1)),
			RunE: func(cmd *cobra.Command, args []string) error {
				p, path, err := loadPlan(args[0])
				if err != nil {
					return err
				}
				if err := f.override(cmd, p); err != nil {
					return err
				}
				if wantNew && p.State != plans.StateNew {
					return badInput("plan %s has already run (state %s): use 'shardctl plan resume %s'", p.ID, p.State, args[0])
				}
				return a.withStore(cmd, func(s *shardmap.Store) error {
					if s.Schema != p.ShardMap.Schema && p.ShardMap.Schema != "" {
						return badInput("plan %s was made for shard map schema %q, but --shardmap names %q", p.ID, p.ShardMap.Schema, s.Schema)
					}
					env := a.env(s)
					if newSource != "" {
						addr, err := dbutil.ParseAddr(newSource)
						if err != nil {
							return badInput("--source: %v", err)
						}
						env.PlanPath = path
						if err := pipeline.Repoint(cmd.Context(), env, p, addr); err != nil {
							return a.opError(err, nil)
						}
					}
					return a.runPlan(cmd.Context(), env, p, path, false)
				})
			},
		}
		f.registerSettings(c, true)
		asks(c, &f.yes) // the plan was reviewed when it was made: nothing to ask
		if !wantNew {
			c.Flags().StringVar(&newSource, "source", "", "after a failover: the promoted replica HOST:PORT that replaces the plan's source (the shard's location moves with it; the binlog tail resumes there by GTID)")
		}
		return c
	}
	var abortYes bool
	abort := &cobra.Command{
		Use: "abort PLAN", Short: "Undo a plan that has not cut over: lift the fence, shard back online, target copy removed", Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, path, err := loadPlan(args[0])
			if err != nil {
				return err
			}
			if err := a.confirm(abortYes, func(w io.Writer) { plans.Print(w, p) }, "abort plan "+p.ID+" ("+p.Summary+")?"); err != nil {
				return err
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				env := a.env(s)
				env.PlanPath = path
				if err := pipeline.Abort(cmd.Context(), env, p); err != nil {
					return a.opError(err, nil)
				}
				return a.emit(map[string]any{"plan_id": p.ID, "state": p.State, "kept": p.AbortKept}, func(w io.Writer) {
					if len(p.AbortKept) > 0 {
						fmt.Fprintf(w, "plan %s aborted; it was stale, so only what it created and nothing live owns was removed. Kept:\n", p.ID)
						for _, k := range p.AbortKept {
							fmt.Fprintf(w, "  - %s\n", k)
						}
						return
					}
					fmt.Fprintf(w, "plan %s aborted: the shard is online at %s, %s\n", p.ID, p.Source.Addr(), copyRemoved(p))
				})
			})
		},
	}
	asks(abort, &abortYes)
	c.AddCommand(list, show, run("apply", "Run a plan written with --plan-out", true), run("resume", "Continue a stopped or crashed plan from its last saved point", false), abort, a.planWatchCmd())
	c.AddCommand(a.windowCmds()...)
	return c
}

// copyRemoved says what an abort (or a window completed on the source side)
// removed: a new shard's whole copy, or, from an existing shard a merge or
// key move wrote into, only the rows it copied there (issue 53).
func copyRemoved(p *plans.Plan) string {
	if p.DropTargetSchema {
		return "the target copy is removed"
	}
	return fmt.Sprintf("the rows it copied into shard %d (%s) are removed, and that shard's own rows stay", p.Target.ShardID, p.Target.Schema)
}

// refError names a plan in its advice by ref (its file's path) where the
// message says 'shardctl plan abort|resume ID': a plan outside the plan
// directory, written with --plan-out, is not found by its id.
type refError struct {
	err     error
	id, ref string
}

func (e *refError) Error() string {
	msg := e.err.Error()
	for _, verb := range []string{"abort", "resume", "revert", "complete", "show"} {
		msg = strings.ReplaceAll(msg, "shardctl plan "+verb+" "+e.id, "shardctl plan "+verb+" "+e.ref)
	}
	return msg
}

func (e *refError) Unwrap() error { return e.err }

// observer renders pipeline progress: bars on a terminal, log lines otherwise.
type observer struct {
	a    *app
	mu   sync.Mutex
	bars map[string]*progress
}

func newObserver(a *app) *observer { return &observer{a: a, bars: map[string]*progress{}} }

func (o *observer) Step(name, state string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b := o.bars[name]; b != nil && state != "started" {
		b.Finish()
		delete(o.bars, name)
	}
	o.a.log.Info("step "+state, "step", name)
}

func (o *observer) Progress(step string, done, total int64, detail string) {
	o.mu.Lock()
	b := o.bars[step]
	if b == nil {
		b = o.a.newProgress(step, total)
		o.bars[step] = b
	}
	o.mu.Unlock()
	b.Set(done, total, detail)
}

func (o *observer) finish() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, b := range o.bars {
		b.Finish()
		delete(o.bars, k)
	}
}
