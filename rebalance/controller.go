package rebalance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/lock"
	"github.com/shardctl/shardctl/merge"
	"github.com/shardctl/shardctl/move"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/shardstatus"
	"github.com/shardctl/shardctl/split"
)

// ByRebalance marks the plans rebalance starts (in plan args), so a later run
// continues its own stopped plans and leaves an operator's alone.
const ByRebalance = "rebalance"

// Controller runs the policy over a fleet: it proposes operations and, with
// Apply, runs each as an ordinary plan through pipeline.RunRetrying, as the move,
// split and merge commands do.
type Controller struct {
	Store   *shardmap.Store
	PlanDir string
	Creds   dbutil.Creds // of the shards, to read their rows and bytes
	Log     *slog.Logger
	Policy  Policy
	Options plans.Options // the settings of the plans it makes

	Apply, Exact, SameServer bool
	Concurrency, Rounds      int
	// Override applies this run's settings to a stopped plan it continues
	// (as 'plan resume' does); Overrides names them for the report.
	Override  func(*plans.Plan) error
	Overrides []string

	// Env is the pipeline environment a plan is made and run with.
	Env func() pipeline.Env
	// Instrument adds plan p's metrics to env; done records its result.
	Instrument func(env pipeline.Env, p *plans.Plan) (_ pipeline.Env, done func(), _ error)
	// Refused reports a planning error a later run would repeat (bad input).
	Refused func(error) bool
	// Redact is an error's text without the password.
	Redact func(error) string
	// Done, when set, is told of each plan as it finishes or stops (with
	// --apply), so the operator sees each blackout as it happens.
	Done func(it Item, finished bool)

	cached *shardmap.Store // a dry run's plans read the map through it
}

// Item is one plan in the report.
type Item struct {
	PlanID    string `json:"plan_id,omitempty"`
	Operation string `json:"operation"`
	ShardID   int    `json:"shard_id"`
	Summary   string `json:"summary"`
	State     string `json:"state,omitempty"`
	Error     string `json:"error,omitempty"`
	// BlackoutMS is a finished plan's write blackout at its cutover.
	BlackoutMS float64 `json:"blackout_ms,omitempty"`
}

// Report is what a run proposed, planned, ran and left.
type Report struct {
	DryRun    bool             `json:"dry_run"`
	Fleet     []Shard          `json:"fleet"`
	Servers   map[string]int64 `json:"server_rows"` // rows per server, as last read
	Proposed  []Op             `json:"proposed"`
	Planned   []Item           `json:"planned,omitempty"` // dry run: each proposal's plan summary, or why it cannot be planned
	Continued []Item           `json:"continued"`
	Started   []Item           `json:"started"`
	Finished  []Item           `json:"finished"`
	Left      []Item           `json:"left"`
	// Unmet are the limits still violated after the last proposal, each with
	// why nothing was proposed for it (busy with a plan, no receiver, …).
	Unmet []Unmet `json:"unmet"`
	// Error is the run's failure (exit 2 or 3), in the one JSON document.
	Error string `json:"error,omitempty"`
}

// StuckError is a run that could do nothing while the fleet is outside the
// policy (a cron loop must not take that for "done").
type StuckError struct{ Why []string }

func (e *StuckError) Error() string {
	return "rebalance: the fleet is outside the policy and nothing could be done: " + strings.Join(e.Why, "; ")
}

// LeftError is a run that stopped with operations left: the next run
// continues them.
type LeftError struct {
	Left  int
	Cause error
}

func (e *LeftError) Error() string {
	return fmt.Sprintf("rebalance: %d operations left (%v); the next run continues them", e.Left, e.Cause)
}

// progressed reports whether the run did anything: continued, started or
// finished a plan.
func (r *Report) progressed() bool {
	for _, it := range append(append(r.Continued, r.Started...), r.Finished...) {
		if it.PlanID != "" {
			return true
		}
	}
	return false
}

// stuck is the run's StuckError, if it is one.
func (r *Report) stuck() error {
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
	return &StuckError{Why: why}
}

// plansAtOnce bounds how many proposals a dry run plans at once.
const plansAtOnce = 4

// lockName is one lock per shard map: two rebalances never plan at once.
func lockName(schema string) string {
	n := "shardctl/" + schema + "/rebalance"
	if len(n) > 64 {
		n = n[len(n)-64:]
	}
	return n
}

// Run proposes, and with Apply runs, the operations that bring the fleet
// inside the policy. A nil report comes with an error that stopped the run
// before it had anything to report (another rebalance holds the shard map's
// lock: lock.ErrBusy); otherwise the error is the report's: a *StuckError, a
// *LeftError, or nil.
func (c *Controller) Run(ctx context.Context) (*Report, error) {
	rep := &Report{DryRun: !c.Apply, Proposed: []Op{}, Continued: []Item{}, Started: []Item{}, Finished: []Item{}, Left: []Item{}}
	ps := planstore.New(c.Store.DB, c.Store.Schema)
	if !c.Apply {
		return c.dryRun(ctx, ps, rep)
	}
	l, err := lock.Acquire(ctx, c.Store.DB, c.Store.Schema, []string{lockName(c.Store.Schema)}, lock.Holder("rebalance"))
	if err != nil {
		if errors.Is(err, lock.ErrBusy) {
			return nil, fmt.Errorf("another rebalance runs on shard map %s: %w", c.Store.Schema, err)
		}
		return nil, err
	}
	defer l.Release()
	ctx, cancel := l.Bind(ctx, errors.New("lost the rebalance lock on the sharding database"))
	defer cancel(nil)

	// First its own stopped plans (a killed run's): each continues where it stopped.
	unfinished, err := planstore.Unfinished(ctx, c.PlanDir, ps)
	if err != nil {
		return nil, err
	}
	var jobs []job
	for _, p := range unfinished {
		if p.Args[ByRebalance] != "" && p.ShardMap.Schema == c.Store.Schema {
			jobs = append(jobs, job{op: opOfPlan(p), plan: p, continued: true})
		}
	}
	failed := false
	for round := 0; round <= c.Rounds && ctx.Err() == nil; round++ {
		if round > 0 {
			ops, err := c.propose(ctx, ps, rep)
			if err != nil {
				return nil, err
			}
			for _, op := range ops {
				jobs = append(jobs, job{op: op})
			}
		}
		if len(jobs) == 0 {
			if round > 0 {
				break
			}
			continue
		}
		if c.runJobs(ctx, jobs, rep) {
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
		return rep, &LeftError{Left: len(rep.Left), Cause: cause}
	}
	return rep, rep.stuck()
}

// dryRun proposes, and plans each proposal (changing nothing).
func (c *Controller) dryRun(ctx context.Context, ps *planstore.Store, rep *Report) (*Report, error) {
	if _, err := c.propose(ctx, ps, rep); err != nil {
		return nil, err
	}
	// Every plan reads the map (twice): read it once while its version stands.
	c.cached = c.Store.Cached()
	defer func() { c.cached = nil }()
	// Planning is mostly waiting on servers (checks, definitions): a few
	// plans at once.
	rep.Planned = make([]Item, len(rep.Proposed))
	sem := make(chan struct{}, plansAtOnce)
	var wg sync.WaitGroup
	for i, op := range rep.Proposed {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			it := Item{Operation: op.Kind, ShardID: op.Shard, Summary: op.String()}
			start := time.Now()
			if p, err := c.plan(ctx, op); err != nil {
				it.Error = c.Redact(err)
			} else {
				it.Summary = p.Summary
			}
			c.Log.Debug("rebalance: planned", "operation", i+1, "keys", len(op.Keys), "took", time.Since(start).Round(time.Millisecond))
			rep.Planned[i] = it
		}()
	}
	wg.Wait()
	return rep, rep.stuck()
}

// propose reads the fleet and assesses it: the report takes the fleet, the
// proposals (added to those of earlier rounds) and the limits left unmet.
func (c *Controller) propose(ctx context.Context, ps *planstore.Store, rep *Report) ([]Op, error) {
	start := time.Now()
	fleet, err := c.readFleet(ctx, ps)
	if err != nil {
		return nil, err
	}
	c.Log.Debug("rebalance: read the fleet", "shards", len(fleet), "took", time.Since(start).Round(time.Millisecond))
	rep.Fleet, rep.Servers = fleet, map[string]int64{}
	for _, s := range fleet {
		rep.Servers[s.Server] += s.Rows
	}
	pol := c.Policy
	pol.Now = time.Now()
	ops, unmet := Assess(fleet, pol)
	rep.Proposed, rep.Unmet = append(rep.Proposed, ops...), unmet
	return ops, nil
}

type job struct {
	op        Op
	plan      *plans.Plan // set when continuing
	continued bool
}

// opOfPlan describes a saved plan as an operation, for scheduling.
func opOfPlan(p *plans.Plan) Op {
	op := Op{Kind: p.Operation, Shard: p.Source.ShardID, From: p.Source.Addr(), To: p.Target.Addr(), Reason: "continue " + p.ID}
	if p.Operation == Merge || p.Operation == MoveKeys {
		op.Into = p.Target.ShardID
	}
	return op
}

// runJobs runs jobs, Concurrency at a time, and reports whether any failed.
func (c *Controller) runJobs(ctx context.Context, jobs []job, rep *Report) bool {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var running []Op
	failed := false
	var wg sync.WaitGroup
	pending := jobs
	mu.Lock()
	for len(pending) > 0 && ctx.Err() == nil {
		started := false
		for i := 0; i < len(pending); i++ {
			j := pending[i]
			if len(running) >= c.Concurrency || !CanStart(j.op, running, c.SameServer) {
				continue
			}
			pending = append(pending[:i:i], pending[i+1:]...)
			i--
			running = append(running, j.op)
			started = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				it, ok := c.runJob(ctx, j)
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
				if c.Done != nil {
					c.Done(it, ok)
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
		rep.Left = append(rep.Left, Item{Operation: j.op.Kind, ShardID: j.op.Shard, Summary: j.op.String(), Error: "not started: the run stopped"})
	}
	return failed
}

// runJob builds (or takes) one plan and runs it to the end.
func (c *Controller) runJob(ctx context.Context, j job) (Item, bool) {
	it := Item{Operation: j.op.Kind, ShardID: j.op.Shard, Summary: j.op.String()}
	p := j.plan
	env := c.Env()
	if p == nil {
		var err error
		if p, err = c.plan(ctx, j.op); err != nil {
			it.Error = c.Redact(err)
			if c.Refused(err) {
				it.State = "refused" // planning said no: the next run would too
			}
			return it, false
		}
		p.Args[ByRebalance] = j.op.Reason
	}
	note := ""
	if j.continued && len(c.Overrides) > 0 {
		// This run's settings apply to the plan it continues, as with 'plan resume'.
		if err := c.Override(p); err != nil {
			it.Error = err.Error()
			return it, false
		}
		note = " (with this run's " + strings.Join(c.Overrides, " ") + ")"
	}
	it.PlanID, it.Summary = p.ID, p.Summary+note
	path := plans.Path(c.PlanDir, p.ID)
	if !j.continued {
		if err := plans.Save(path, p); err != nil {
			it.Error = err.Error()
			return it, false
		}
	}
	env.PlanPath = path
	env.Observer = logObserver{log: c.Log, plan: p.ID}
	env, recorded, err := c.Instrument(env, p)
	if err == nil {
		c.Log.Info("rebalance: running", "plan", p.ID, "summary", p.Summary)
		err = pipeline.RunRetrying(ctx, env, p)
		recorded()
	}
	it.State, it.BlackoutMS = p.State, p.Result.BlackoutMS
	if !j.continued && pipeline.DiscardRefused(c.Store, p, path, err, c.Log) {
		it.PlanID, it.State = "", "refused" // nothing changed, nothing kept
	}
	if err != nil {
		it.Error = c.Redact(err)
		if errors.Is(err, lock.ErrBusy) {
			it.State = "in flight"
		}
		c.Log.Warn("rebalance: operation left", "plan", p.ID, "err", it.Error)
		return it, false
	}
	return it, true
}

// plan builds the ordinary plan of one proposed operation (changing
// nothing), as the operation's command would.
func (c *Controller) plan(ctx context.Context, op Op) (*plans.Plan, error) {
	env := c.Env()
	if c.cached != nil {
		env.Store = c.cached
	}
	to, err := dbutil.ParseAddr(op.To)
	if err != nil {
		return nil, err
	}
	switch {
	case len(op.Keys) > 0:
		// A shard rebalance splits off stays shared (dedicated is the
		// operator's call: it would freeze the shards a chain of splits makes).
		req := move.KeysRequest{ShardID: op.Shard, Keys: op.Keys, Into: op.Into, Shared: true, Options: c.Options}
		if op.Into == 0 {
			req.To = to
		}
		return move.PlanKeys(ctx, env, req)
	case op.Kind == Split:
		return split.Plan(ctx, env, split.Request{ShardID: op.Shard, To: to, Options: c.Options})
	case op.Kind == Merge:
		return merge.Plan(ctx, env, merge.Request{ShardID: op.Shard, Into: op.Into, Options: c.Options})
	default:
		return move.Plan(ctx, env, move.Request{ShardID: op.Shard, To: to, Options: c.Options})
	}
}

// readFleet reads every mapped shard's rows and bytes. Shards with an
// unfinished plan are busy: counted, never touched.
func (c *Controller) readFleet(ctx context.Context, ps *planstore.Store) ([]Shard, error) {
	s := c.Store
	m, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	busy := map[int]string{} // shard: the plan that keeps it busy
	unfinished, err := planstore.Unfinished(ctx, c.PlanDir, ps)
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
	fleet, err := fleetOf(m, shardstatus.ReadAll(ctx, m, locs, c.Creds, c.Exact), busy)
	if err != nil || c.Policy.MaxShardRows == 0 && c.Policy.MaxShardBytes == 0 && c.Policy.MaxServerShare == 0 {
		return fleet, err
	}
	// A LIST shard is weighed by its tenants: each key's rows, counted, and
	// their bytes; with when the key last moved, for the cool-down.
	movedAt := map[string]*time.Time{}
	for _, mp := range m.Mappings {
		if mp.MovedAt != nil && mp.Point != nil {
			movedAt[mp.Point.String()] = mp.MovedAt
		}
	}
	keys := map[int][]Key{}
	err = shardstatus.EachShardKeys(ctx, m, locs, c.Creds, func(_ shardmap.Function, l shardmap.Location, counts map[string]shardstatus.Weight) {
		ks := make([]Key, 0, len(counts))
		for k, w := range counts {
			ks = append(ks, Key{Key: k, Rows: w.Rows, Bytes: w.Bytes, MovedAt: movedAt[k]})
		}
		sort.Slice(ks, func(i, j int) bool {
			return ks[i].Rows > ks[j].Rows || ks[i].Rows == ks[j].Rows && ks[i].Key < ks[j].Key
		})
		keys[l.ShardID] = ks
	})
	if err != nil {
		return nil, fmt.Errorf("rebalance: %w", err)
	}
	for i := range fleet {
		if ks, ok := keys[fleet[i].ID]; ok {
			fleet[i].Keys, fleet[i].Tenants, fleet[i].Rows = ks, len(ks), 0
			for _, k := range ks {
				fleet[i].Rows += k.Rows
			}
		}
	}
	return fleet, nil
}

// fleetOf is the policy's view of the shards read: each shard's figures,
// and for a shard with one mapping its function and position among the
// function's mappings (each function's mappings are ordered once, not once
// per shard: at a thousand shards that was a million mappings sorted).
func fleetOf(m *shardmap.Map, sts []shardstatus.Shard, busy map[int]string) ([]Shard, error) {
	order := map[int]map[int]int{} // function: shard: position
	out := make([]Shard, 0, len(sts))
	for _, st := range sts {
		if st.Error != "" {
			return nil, fmt.Errorf("rebalance: shard %d (%s on %s): %s", st.ShardID, st.Schema, st.Server, st.Error)
		}
		sh := Shard{ID: st.ShardID, Server: st.Server, Rows: st.Rows, Bytes: st.ShardedBytes, Busy: busy[st.ShardID] != "", BusyWith: busy[st.ShardID], Dedicated: st.Dedicated}
		if f, ok := shardstatus.ListFunction(m, st.Mappings); ok {
			sh.Func, sh.Kind = f.ID, string(shardmap.List) // its keys move; no order among them
		} else if mps := st.Mappings; len(mps) == 1 {
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

// logObserver reports concurrent runs as log lines (bars would interleave).
type logObserver struct {
	log  *slog.Logger
	plan string
}

func (o logObserver) Step(name, state string) {
	o.log.Info("step "+state, "step", name, "plan", o.plan)
}
func (o logObserver) Progress(string, int64, int64, string) {}
