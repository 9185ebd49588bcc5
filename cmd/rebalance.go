package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/rebalance"
	"github.com/shardctl/shardctl/shardmap"
)

type rebalanceFlags struct {
	op                  opFlags
	policy              rebalance.Policy
	apply, exact, share bool
	concurrency, rounds int
	drain, servers      []string
	// override applies this run's settings flags (those 'plan resume' takes)
	// to a stopped plan it continues; overrides names them for the report.
	override  func(*plans.Plan) error
	overrides []string
}

// finish prints the report with the run's error, and returns the error.
func (a *app) finishRebalance(rep *rebalance.Report, err error) error {
	if err != nil {
		rep.Error = dbutil.Redact(err, a.v.GetString("password")).Error()
	}
	if eerr := a.emit(rep, func(w io.Writer) { printRebalance(w, rep) }); eerr != nil {
		return eerr
	}
	return err
}

func (a *app) rebalanceCmd() *cobra.Command {
	var f rebalanceFlags
	c := &cobra.Command{
		Use:   "rebalance [--apply]",
		Short: "Propose (or with --apply run) the splits, merges and moves that keep shards and servers inside a policy",
		Long: `rebalance reads every shard's rows and bytes and proposes operations:
split a RANGE or HASH shard above --max-shard-rows/--max-shard-bytes at its
median key (ring arc midpoint), merge neighbouring shards whose sum is under
--min-shard-rows/--min-shard-bytes, and move shards so that no server holds
more than --max-server-share of all rows (--drain HOST:PORT empties a server).
A LIST shard is weighed by its tenants (each key's rows, counted): a tenant
over --max-shard-rows is isolated on a shard of its own, and a server over
its share gives tenants (move --keys ... --into a LIST shard on the receiver)
rather than whole shards. Tenants are weighed by rows and bytes, and a shard
over --max-shard-rows (or --max-shard-bytes) gets the whole chain of splits
it needs in one proposal.

A dedicated shard ('shardctl shardmap set-policy --shard ID --dedicated';
'move --keys ... --to' marks the shard it creates) is counted and never
touched: no key moves into or out of it. A key that moved less than
--min-key-age ago (default 24h; its time is kept in the shard map) stays
where it is. Keys are printed as runs and counts; -o json and each plan
hold the full lists. With --apply each operation's blackout is printed as
it finishes.

Without --apply it is a dry run: it prints the proposal and each operation's
plan summary and changes nothing. With --apply it runs each operation as an
ordinary plan, --concurrency at a time, never two on one shard or (unless
--same-server) one server. Safe from cron (docs/cron.md): one rebalance runs
per shard map (another exits 4), it first continues its own stopped plans,
leaves shards with an operator's unfinished plan alone, and exits 0 when
there is nothing to do. Limits it cannot meet are listed with why (a shard
busy with a plan, no server to receive a shard, ...); when the fleet is outside
the policy and a run can do nothing, it exits 2. The settings flags of a run
(--max-blackout, --chunk-rows, ... as 'plan resume' takes them) apply to the
stopped plans it continues.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.op.planOut != "" {
				return badInput("rebalance runs its plans itself: --plan-out does not apply")
			}
			if f.apply && f.op.dryRun {
				return badInput("give --apply or --dry-run, not both")
			}
			if err := f.op.validate(cmd); err != nil {
				return err
			}
			f.override = func(p *plans.Plan) error { return f.op.override(cmd, p) }
			for _, s := range plans.Settings {
				if fl := cmd.Flags().Lookup(s.Flag); s.OnRun && fl != nil && fl.Changed {
					f.overrides = append(f.overrides, "--"+s.Flag+"="+fl.Value.String())
				}
			}
			for _, list := range []struct {
				name string
				in   []string
				out  *[]string
			}{{"--drain", f.drain, &f.policy.Drain}, {"--server", f.servers, &f.policy.Servers}} {
				for _, s := range list.in {
					addr, err := dbutil.ParseAddr(s)
					if err != nil {
						return badInput("%s: %v", list.name, err)
					}
					*list.out = append(*list.out, addr.String())
				}
			}
			if err := f.policy.Valid(); err != nil {
				return badInput("%v", err)
			}
			if pl := f.policy; pl.MaxShardRows == 0 && pl.MaxShardBytes == 0 && pl.MinShardRows == 0 && pl.MinShardBytes == 0 && pl.MaxServerShare == 0 && len(pl.Drain) == 0 {
				return badInput("no policy: give at least one of --max-shard-rows, --max-shard-bytes, --min-shard-rows, --min-shard-bytes, --max-server-share, --drain")
			}
			return a.withStore(cmd, func(s *shardmap.Store) error { return a.rebalance(cmd.Context(), s, &f) })
		},
	}
	f.op.register(c)
	fl := c.Flags()
	fl.BoolVar(&f.apply, "apply", false, "run the proposed operations (default: print them and change nothing)")
	fl.IntVar(&f.concurrency, "concurrency", 1, "operations run at once")
	fl.BoolVar(&f.share, "same-server", false, "allow two operations on one server at once")
	fl.IntVar(&f.rounds, "rounds", 3, "with --apply: re-read the fleet and propose again up to this many times")
	fl.BoolVar(&f.exact, "exact", false, "count rows exactly (SELECT COUNT(*)) instead of information_schema's estimates")
	fl.Int64Var(&f.policy.MaxShardRows, "max-shard-rows", 0, "split shards with more rows than this (0: off)")
	fl.Int64Var(&f.policy.MaxShardBytes, "max-shard-bytes", 0, "split shards larger than this many bytes (0: off)")
	fl.Int64Var(&f.policy.MinShardRows, "min-shard-rows", 0, "merge neighbouring shards whose rows sum to less than this (0: off)")
	fl.Int64Var(&f.policy.MinShardBytes, "min-shard-bytes", 0, "merge neighbouring shards whose bytes sum to less than this (0: off)")
	fl.Float64Var(&f.policy.MaxServerShare, "max-server-share", 0, "move shards so no server holds more than this fraction of all rows, e.g. 0.4 (0: off)")
	fl.StringArrayVar(&f.drain, "drain", nil, "move every shard off this server HOST:PORT (repeat for several)")
	fl.DurationVar(&f.policy.MinKeyAge, "min-key-age", 24*time.Hour, "cool-down: leave a key (tenant) that moved less than this ago where it is (0: off)")
	fl.StringArrayVar(&f.servers, "server", nil, "a server HOST:PORT that may receive shards although it holds none yet (repeat for several)")
	return c
}

// rebalance runs the policy through the rebalance controller and reports.
func (a *app) rebalance(ctx context.Context, s *shardmap.Store, f *rebalanceFlags) error {
	// Outputs that can refuse the run are opened before anything is planned or saved.
	if _, err := a.metricsSink(); err != nil {
		return err
	}
	c := &rebalance.Controller{
		Store: s, PlanDir: a.planDir(), Creds: a.shardCreds(), Log: a.log,
		Policy: f.policy, Options: f.op.options(),
		Apply: f.apply, Exact: f.exact, SameServer: f.share, Concurrency: f.concurrency, Rounds: f.rounds,
		Override: f.override, Overrides: f.overrides,
		Env:        func() pipeline.Env { return a.env(s) },
		Instrument: a.withMetrics,
		Refused:    func(err error) bool { return exitCode(a.opError(err, nil)) == ExitBadInput },
		Redact:     func(err error) string { return dbutil.Redact(err, a.v.GetString("password")).Error() },
	}
	if !a.jsonOut() {
		c.Done = func(it rebalance.Item, finished bool) { printItem(a.out, itemState(finished), it) }
	}
	rep, err := c.Run(ctx)
	if rep == nil {
		if errors.Is(err, lock.ErrBusy) {
			return withCode(ExitBusy, err)
		}
		return err
	}
	var left *rebalance.LeftError
	var stuck *rebalance.StuckError
	switch {
	case errors.As(err, &left):
		err = withCode(ExitResumable, err)
	case errors.As(err, &stuck):
		err = withCode(ExitBadInput, err)
	}
	return a.finishRebalance(rep, err)
}

func printRebalance(w io.Writer, r *rebalance.Report) {
	servers := make([]string, 0, len(r.Servers))
	for s := range r.Servers {
		servers = append(servers, s)
	}
	sort.Strings(servers)
	for _, s := range servers {
		fmt.Fprintf(w, "server %s: %d rows\n", s, r.Servers[s])
	}
	defer printUnmet(w, r.Unmet)
	if r.DryRun {
		if len(r.Proposed) == 0 {
			if len(r.Unmet) == 0 {
				fmt.Fprintln(w, "nothing to do: every shard and server is inside the policy")
			}
			return
		}
		fmt.Fprintln(w, "proposed operations (dry run: nothing was changed; --apply runs them):")
		for i, op := range r.Proposed {
			fmt.Fprintf(w, "  %d. %s\n", i+1, op.Describe())
			fmt.Fprintf(w, "     why: %s\n", op.Reason)
			if it := r.Planned[i]; it.Error != "" {
				fmt.Fprintf(w, "     cannot plan it: %s\n", it.Error)
			} else {
				fmt.Fprintf(w, "     plan: %s\n", it.Summary)
			}
		}
		return
	}
	if len(r.Continued)+len(r.Started)+len(r.Left) == 0 {
		if len(r.Unmet) == 0 {
			fmt.Fprintln(w, "nothing to do: every shard and server is inside the policy")
		}
		return
	}
	// Each finished plan was printed as it finished, with its blackout.
	fmt.Fprintf(w, "%d continued, %d started, %d finished, %d left\n", len(r.Continued), len(r.Started), len(r.Finished), len(r.Left))
	for _, it := range r.Left {
		printItem(w, "left", it)
	}
}

// itemState names how a plan ended for its report line.
func itemState(finished bool) string {
	if finished {
		return "finished"
	}
	return "stopped"
}

// printItem prints one plan of a rebalance run: its summary, its blackout
// when it cut over, and its error on a line of its own.
func printItem(w io.Writer, state string, it rebalance.Item) {
	line := strings.TrimSpace(fmt.Sprintf("%-8s %s %s", state, it.PlanID, it.Summary))
	if it.BlackoutMS > 0 {
		line += fmt.Sprintf("; blackout %.1f ms", it.BlackoutMS)
	}
	fmt.Fprintln(w, line)
	if it.Error != "" {
		fmt.Fprintf(w, "         error: %s\n", it.Error)
	}
}

// printUnmet lists the limits left violated, each with why nothing was proposed.
func printUnmet(w io.Writer, unmet []rebalance.Unmet) {
	if len(unmet) == 0 {
		return
	}
	fmt.Fprintln(w, "outside the policy, and nothing proposed for it:")
	for _, u := range unmet {
		fmt.Fprintf(w, "  - %s\n", u)
	}
}
