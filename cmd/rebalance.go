package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/merge"
	"github.com/shardctl/shardctl/move"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/rebalance"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/shardstatus"
	"github.com/shardctl/shardctl/split"
)

// byRebalance marks the plans rebalance starts (in plan args), so a later run
// continues its own stopped plans and leaves an operator's alone.
const byRebalance = "rebalance"

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

// rebalanceItem is one plan in the report.
type rebalanceItem struct {
	PlanID    string `json:"plan_id,omitempty"`
	Operation string `json:"operation"`
	ShardID   int    `json:"shard_id"`
	Summary   string `json:"summary"`
	State     string `json:"state,omitempty"`
	Error     string `json:"error,omitempty"`
}

type rebalanceReport struct {
	DryRun    bool              `json:"dry_run"`
	Fleet     []rebalance.Shard `json:"fleet"`
	Servers   map[string]int64  `json:"server_rows"` // rows per server, as last read
	Proposed  []rebalance.Op    `json:"proposed"`
	Planned   []rebalanceItem   `json:"planned,omitempty"` // dry run: each proposal's plan summary, or why it cannot be planned
	Continued []rebalanceItem   `json:"continued"`
	Started   []rebalanceItem   `json:"started"`
	Finished  []rebalanceItem   `json:"finished"`
	Left      []rebalanceItem   `json:"left"`
	// Unmet are the limits still violated after the last proposal, each with
	// why nothing was proposed for it (busy with a plan, no receiver, …).
	Unmet []rebalance.Unmet `json:"unmet"`
	// Error is the run's failure (exit 2 or 3), in the one JSON document.
	Error string `json:"error,omitempty"`
}

// finish prints the report with the run's error, and returns the error.
func (a *app) finishRebalance(rep *rebalanceReport, err error) error {
	if err != nil {
		rep.Error = dbutil.Redact(err, a.v.GetString("password")).Error()
	}
	if eerr := a.emit(rep, func(w io.Writer) { printRebalance(w, rep) }); eerr != nil {
		return eerr
	}
	return err
}

// progressed reports whether the run did anything: continued, started or
// finished a plan.
func (r *rebalanceReport) progressed() bool {
	for _, it := range append(append(r.Continued, r.Started...), r.Finished...) {
		if it.PlanID != "" {
			return true
		}
	}
	return false
}

// stuck is the exit-2 error of a run that could do nothing while the fleet
// is outside the policy (a cron loop must not take that for "done").
func (r *rebalanceReport) stuck() error {
	if r.progressed() || r.DryRun && len(r.Proposed) > 0 {
		return nil
	}
	var why []string
	for _, u := range r.Unmet {
		why = append(why, u.String())
	}
	for _, it := range r.Left {
		if it.State == "refused" {
			why = append(why, fmt.Sprintf("shard %d: %s refused: %s", it.ShardID, it.Operation, it.Error))
		}
	}
	if len(why) == 0 {
		return nil
	}
	return withCode(ExitBadInput, fmt.Errorf("rebalance: the fleet is outside the policy and nothing could be done: %s", strings.Join(why, "; ")))
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
	fl.StringArrayVar(&f.servers, "server", nil, "a server HOST:PORT that may receive shards although it holds none yet (repeat for several)")
	return c
}

// rebalanceLock is one lock per shard map: two rebalances never plan at once.
func rebalanceLock(schema string) string {
	n := "shardctl/" + schema + "/rebalance"
	if len(n) > 64 {
		n = n[len(n)-64:]
	}
	return n
}

func (a *app) rebalance(ctx context.Context, s *shardmap.Store, f *rebalanceFlags) error {
	// Outputs that can refuse the run are opened before anything is planned or saved.
	if _, err := a.metricsSink(); err != nil {
		return err
	}
	rep := &rebalanceReport{DryRun: !f.apply, Proposed: []rebalance.Op{}, Continued: []rebalanceItem{}, Started: []rebalanceItem{}, Finished: []rebalanceItem{}, Left: []rebalanceItem{}}
	ps := planstore.New(s.DB, s.Schema)
	if !f.apply {
		fleet, err := a.readFleet(ctx, s, ps, f.exact)
		if err != nil {
			return err
		}
		rep.setFleet(fleet)
		ops, unmet := rebalance.Assess(fleet, f.policy)
		rep.Proposed, rep.Unmet = append(rep.Proposed, ops...), unmet
		for _, op := range rep.Proposed {
			it := rebalanceItem{Operation: op.Kind, ShardID: op.Shard, Summary: op.String()}
			if p, err := a.planOp(ctx, s, op, f); err != nil {
				it.Error = dbutil.Redact(err, a.v.GetString("password")).Error()
			} else {
				it.Summary = p.Summary
			}
			rep.Planned = append(rep.Planned, it)
		}
		return a.finishRebalance(rep, rep.stuck())
	}
	l, err := lock.Acquire(ctx, s.DB, s.Schema, []string{rebalanceLock(s.Schema)}, lock.Holder("rebalance"))
	if err != nil {
		if errors.Is(err, lock.ErrBusy) {
			return withCode(ExitBusy, fmt.Errorf("another rebalance runs on shard map %s: %w", s.Schema, err))
		}
		return err
	}
	defer l.Release()
	ctx, cancel := l.Bind(ctx, errors.New("lost the rebalance lock on the sharding database"))
	defer cancel(nil)

	// First its own stopped plans (a killed run's): each continues where it stopped.
	unfinished, err := planstore.Unfinished(ctx, a.planDir(), ps)
	if err != nil {
		return err
	}
	var jobs []rebalanceJob
	for _, p := range unfinished {
		if p.Args[byRebalance] != "" && p.ShardMap.Schema == s.Schema {
			jobs = append(jobs, rebalanceJob{op: opOfPlan(p), plan: p, continued: true})
		}
	}
	failed := false
	for round := 0; round <= f.rounds && ctx.Err() == nil; round++ {
		if round > 0 {
			fleet, err := a.readFleet(ctx, s, ps, f.exact)
			if err != nil {
				return err
			}
			rep.setFleet(fleet)
			ops, unmet := rebalance.Assess(fleet, f.policy)
			rep.Proposed, rep.Unmet = append(rep.Proposed, ops...), unmet
			for _, op := range ops {
				jobs = append(jobs, rebalanceJob{op: op})
			}
		}
		if len(jobs) == 0 {
			if round > 0 {
				break
			}
			continue
		}
		if a.runJobs(ctx, s, f, jobs, rep) {
			failed = true
			break // a failing operation is left for the next run, not retried in a loop
		}
		jobs = nil
	}
	if failed || ctx.Err() != nil {
		cause := context.Cause(ctx)
		if cause == nil {
			cause = errors.New("some operations did not finish")
		}
		return a.finishRebalance(rep, withCode(ExitResumable, fmt.Errorf("rebalance: %d operations left (%v); the next run continues them", len(rep.Left), cause)))
	}
	return a.finishRebalance(rep, rep.stuck())
}

func (r *rebalanceReport) setFleet(fleet []rebalance.Shard) {
	r.Fleet, r.Servers = fleet, map[string]int64{}
	for _, s := range fleet {
		r.Servers[s.Server] += s.Rows
	}
}

type rebalanceJob struct {
	op        rebalance.Op
	plan      *plans.Plan // set when continuing
	continued bool
}

// opOfPlan describes a saved plan as an operation, for scheduling.
func opOfPlan(p *plans.Plan) rebalance.Op {
	op := rebalance.Op{Kind: p.Operation, Shard: p.Source.ShardID, From: p.Source.Addr(), To: p.Target.Addr(), Reason: "continue " + p.ID}
	if p.Operation == rebalance.Merge {
		op.Into = p.Target.ShardID
	}
	return op
}

// runJobs runs jobs, concurrency at a time, and reports whether any failed.
func (a *app) runJobs(ctx context.Context, s *shardmap.Store, f *rebalanceFlags, jobs []rebalanceJob, rep *rebalanceReport) bool {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var running []rebalance.Op
	failed := false
	var wg sync.WaitGroup
	pending := jobs
	mu.Lock()
	for len(pending) > 0 && ctx.Err() == nil {
		started := false
		for i := 0; i < len(pending); i++ {
			j := pending[i]
			if len(running) >= f.concurrency || !rebalance.CanStart(j.op, running, f.share) {
				continue
			}
			pending = append(pending[:i:i], pending[i+1:]...)
			i--
			running = append(running, j.op)
			started = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				it, ok := a.runJob(ctx, s, f, j)
				mu.Lock()
				defer mu.Unlock()
				for k, o := range running {
					if o.Shard == j.op.Shard {
						running = append(running[:k:k], running[k+1:]...)
						break
					}
				}
				if j.continued {
					rep.Continued = append(rep.Continued, it)
				} else if it.PlanID != "" {
					rep.Started = append(rep.Started, it)
				}
				if ok {
					rep.Finished = append(rep.Finished, it)
				} else {
					rep.Left = append(rep.Left, it)
					failed = failed || it.State != "in flight" && it.State != "refused"
				}
				cond.Broadcast()
			}()
		}
		if !started {
			cond.Wait()
		}
	}
	mu.Unlock()
	wg.Wait()
	for _, j := range pending {
		rep.Left = append(rep.Left, rebalanceItem{Operation: j.op.Kind, ShardID: j.op.Shard, Summary: j.op.String(), Error: "not started: the run stopped"})
	}
	return failed
}

// runJob builds (or takes) one plan and runs it to the end.
func (a *app) runJob(ctx context.Context, s *shardmap.Store, f *rebalanceFlags, j rebalanceJob) (rebalanceItem, bool) {
	it := rebalanceItem{Operation: j.op.Kind, ShardID: j.op.Shard, Summary: j.op.String()}
	p := j.plan
	env := a.env(s)
	if p == nil {
		var err error
		if p, err = a.planOp(ctx, s, j.op, f); err != nil {
			it.Error = dbutil.Redact(err, a.v.GetString("password")).Error()
			if exitCode(a.opError(err, nil)) == ExitBadInput {
				it.State = "refused" // planning said no: the next run would too
			}
			return it, false
		}
		p.Args[byRebalance] = j.op.Reason
	}
	note := ""
	if j.continued && len(f.overrides) > 0 {
		// This run's settings apply to the plan it continues, as with 'plan resume'.
		if err := f.override(p); err != nil {
			it.Error = err.Error()
			return it, false
		}
		note = " (with this run's " + strings.Join(f.overrides, " ") + ")"
	}
	it.PlanID, it.Summary = p.ID, p.Summary+note
	path := plans.Path(a.planDir(), p.ID)
	if !j.continued {
		if err := plans.Save(path, p); err != nil {
			it.Error = err.Error()
			return it, false
		}
	}
	env.PlanPath = path
	env.Observer = logObserver{a: a, plan: p.ID}
	env, recorded, err := a.withMetrics(env, p)
	if err == nil {
		a.log.Info("rebalance: running", "plan", p.ID, "summary", p.Summary)
		err = pipeline.Run(ctx, env, p)
		recorded()
	}
	it.State = p.State
	if !j.continued && a.discardRefused(s, p, path, err) {
		it.PlanID, it.State = "", "refused" // nothing changed, nothing kept
	}
	if err != nil {
		it.Error = dbutil.Redact(err, a.v.GetString("password")).Error()
		if errors.Is(err, lock.ErrBusy) {
			it.State = "in flight"
		}
		a.log.Warn("rebalance: operation left", "plan", p.ID, "err", it.Error)
		return it, false
	}
	return it, true
}

// planOp builds the ordinary plan of one proposed operation (changing nothing).
func (a *app) planOp(ctx context.Context, s *shardmap.Store, op rebalance.Op, f *rebalanceFlags) (*plans.Plan, error) {
	env := a.env(s)
	opts := f.op.options()
	to, err := dbutil.ParseAddr(op.To)
	if err != nil {
		return nil, err
	}
	switch op.Kind {
	case rebalance.Split:
		return split.Plan(ctx, env, split.Request{ShardID: op.Shard, To: to, Options: opts})
	case rebalance.Merge:
		return merge.Plan(ctx, env, merge.Request{ShardID: op.Shard, Into: op.Into, Options: opts})
	default:
		return move.Plan(ctx, env, move.Request{ShardID: op.Shard, To: to, Options: opts})
	}
}

// readFleet reads every mapped shard's rows and bytes. Shards with an
// unfinished plan are busy: counted, never touched.
func (a *app) readFleet(ctx context.Context, s *shardmap.Store, ps *planstore.Store, exact bool) ([]rebalance.Shard, error) {
	m, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	busy := map[int]string{} // shard: the plan that keeps it busy
	unfinished, err := planstore.Unfinished(ctx, a.planDir(), ps)
	if err != nil {
		return nil, err
	}
	for _, p := range unfinished {
		if p.ShardMap.Schema == "" || p.ShardMap.Schema == s.Schema {
			with := fmt.Sprintf("plan %s (%s; 'shardctl plan resume %s' or 'shardctl plan abort %s')", p.ID, p.State, p.ID, p.ID)
			busy[p.Source.ShardID], busy[p.Target.ShardID] = with, with
		}
	}
	// Only mapped shards: nothing routes to one without a mapping (a split's
	// new shard before its cutover). Read per server, as 'status' does.
	var locs []shardmap.Location
	for _, loc := range m.Locations {
		if len(m.ShardMappings(loc.ShardID)) > 0 {
			locs = append(locs, loc)
		}
	}
	return fleetOf(m, shardstatus.ReadAll(ctx, m, locs, a.shardCreds(), exact), busy)
}

// fleetOf is the policy's view of the shards read: each shard's figures,
// and for a shard with one mapping its function and position among the
// function's mappings (each function's mappings are ordered once, not once
// per shard: at a thousand shards that was a million mappings sorted).
func fleetOf(m *shardmap.Map, sts []shardstatus.Shard, busy map[int]string) ([]rebalance.Shard, error) {
	order := map[int]map[int]int{} // function: shard: position
	out := make([]rebalance.Shard, 0, len(sts))
	for _, st := range sts {
		if st.Error != "" {
			return nil, fmt.Errorf("rebalance: shard %d (%s on %s): %s", st.ShardID, st.Schema, st.Server, st.Error)
		}
		sh := rebalance.Shard{ID: st.ShardID, Server: st.Server, Rows: st.Rows, Bytes: st.ShardedBytes, Busy: busy[st.ShardID] != "", BusyWith: busy[st.ShardID]}
		if mps := st.Mappings; len(mps) == 1 {
			f := mps[0].FuncID
			sh.Func, sh.Kind = f, string(mps[0].Kind)
			pos, ok := order[f]
			if !ok {
				pos = map[int]int{}
				for i, o := range m.MappingsOf(f) {
					pos[o.ShardID] = i
				}
				order[f] = pos
			}
			sh.Order = pos[st.ShardID]
		}
		out = append(out, sh)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func printRebalance(w io.Writer, r *rebalanceReport) {
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
			fmt.Fprintf(w, "  %d. %s\n", i+1, op)
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
	for _, g := range []struct {
		name  string
		items []rebalanceItem
	}{{"continued", r.Continued}, {"started", r.Started}, {"finished", r.Finished}, {"left", r.Left}} {
		for _, it := range g.items {
			line := fmt.Sprintf("%-9s %s %s", g.name, it.PlanID, it.Summary)
			if it.Error != "" {
				line += " (" + it.Error + ")"
			}
			fmt.Fprintln(w, strings.TrimSpace(line))
		}
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

// logObserver reports concurrent runs as log lines (bars would interleave).
type logObserver struct {
	a    *app
	plan string
}

func (o logObserver) Step(name, state string) {
	o.a.log.Info("step "+state, "step", name, "plan", o.plan)
}
func (o logObserver) Progress(string, int64, int64, string) {}
