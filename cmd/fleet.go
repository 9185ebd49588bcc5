package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/shardctl/shardctl/hooks"
	"github.com/shardctl/shardctl/metrics"
	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/shardmap"
)

// fleet is the per-process state of the fleet features: hooks, metrics, and
// the copy of plans in the sharding database.
type fleet struct {
	hooks *hooks.Runner

	mu       sync.Mutex
	sink     *metrics.Sink
	sinkErr  error
	warnedAt time.Time
}

func fleetFlags(pf *pflag.FlagSet) {
	pf.StringArray("hook", nil, "run an executable at a point of every plan's run: POINT=PATH, POINT one of plan-start, before-fence, after-cutover, after-cleanup, on-failure (repeat for several; see docs/hooks.md) [config: hooks:]")
	pf.Duration("hook-timeout", hooks.DefaultTimeout, "kill a hook that runs longer than this")
	pf.String("metrics-file", "", "write Prometheus text format to FILE during and after the run (node_exporter textfile collector; see docs/metrics.md)")
	pf.String("metrics-addr", "", "serve Prometheus metrics on HOST:PORT/metrics while running")
}

// loadFleet checks the hook configuration (config 'hooks:' maps a point to a
// path or a list of paths; --hook adds POINT=PATH).
func (a *app) loadFleet() error {
	paths := map[string][]string{}
	for point, v := range a.v.GetStringMap("hooks") {
		var list []string
		switch x := v.(type) {
		case string:
			list = []string{x}
		case []any:
			for _, e := range x {
				list = append(list, fmt.Sprint(e))
			}
		default:
			return badInput("config hooks.%s: give a path or a list of paths", point)
		}
		for _, p := range list {
			if err := hooks.Parse(paths, point+"="+p, pipeline.HookPoints); err != nil {
				return badInput("config: %v", err)
			}
		}
	}
	for _, spec := range a.v.GetStringSlice("hook") {
		if err := hooks.Parse(paths, spec, pipeline.HookPoints); err != nil {
			return badInput("--%v", err)
		}
	}
	for point, list := range paths {
		for _, p := range list {
			if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				return badInput("%s hook %s: not an executable file", point, p)
			}
		}
	}
	a.fleet = &fleet{}
	if len(paths) > 0 {
		a.fleet.hooks = &hooks.Runner{Paths: paths, Timeout: a.v.GetDuration("hook-timeout"), Output: a.errOut, Log: a.log}
	}
	return nil
}

// metricsSink starts the metrics outputs on first use (nil when none asked for).
func (a *app) metricsSink() (*metrics.Sink, error) {
	file, addr := a.v.GetString("metrics-file"), a.v.GetString("metrics-addr")
	if a.fleet == nil || (file == "" && addr == "") {
		return nil, nil
	}
	a.fleet.mu.Lock()
	defer a.fleet.mu.Unlock()
	if a.fleet.sink == nil && a.fleet.sinkErr == nil {
		a.fleet.sink, a.fleet.sinkErr = metrics.New(file, addr, a.log)
		if a.fleet.sinkErr != nil {
			a.fleet.sinkErr = withCode(ExitBadInput, a.fleet.sinkErr)
		}
	}
	return a.fleet.sink, a.fleet.sinkErr
}

// closeFleet writes the metrics file a last time.
func (a *app) closeFleet() {
	if a.fleet == nil {
		return
	}
	a.fleet.mu.Lock()
	s := a.fleet.sink
	a.fleet.mu.Unlock()
	if err := s.Close(); err != nil {
		a.log.Warn("metrics", "err", err)
	}
}

// addFleet wires the plan store and the hooks into a pipeline run.
func (a *app) addFleet(env *pipeline.Env, s *shardmap.Store) {
	ps := planstore.New(s.DB, s.Schema)
	env.Saved = func(p *plans.Plan) {
		ctx, cancel := context.WithTimeout(context.Background(), planstore.Timeout)
		defer cancel()
		if err := ps.Put(ctx, p); err != nil && a.fleet != nil {
			a.fleet.mu.Lock()
			warn := time.Since(a.fleet.warnedAt) > 30*time.Second
			if warn {
				a.fleet.warnedAt = time.Now()
			}
			a.fleet.mu.Unlock()
			if warn {
				a.log.Warn("could not store the plan in the sharding database; the plan file is saved and the run goes on", "plan", p.ID, "err", err)
			}
		}
	}
	if a.fleet != nil && a.fleet.hooks != nil {
		env.Hook = a.fleet.hooks.Run
	}
}

// withMetrics adds plan p's metrics observer to env; done records the result.
func (a *app) withMetrics(env pipeline.Env, p *plans.Plan) (pipeline.Env, func(), error) {
	sink, err := a.metricsSink()
	if err != nil || sink == nil {
		return env, func() {}, err
	}
	o := sink.Plan(p)
	env.Observer = pipeline.Tee(env.Observer, o)
	return env, func() { o.Finish(p) }, nil
}

// planStore opens the sharding database's plans table when a shard map is
// configured and reachable; plan commands then fall back to the plan directory.
func (a *app) planStore(ctx context.Context) (*planstore.Store, func()) {
	if a.v.GetString("shardmap") == "" {
		return nil, func() {}
	}
	s, closeFn, err := a.store(ctx)
	if err != nil {
		a.log.Warn("sharding database unreachable: looking in the plan directory only", "err", err)
		return nil, func() {}
	}
	return planstore.New(s.DB, s.Schema), closeFn
}

// findPlan looks for plan ref in the plan directory and the sharding
// database's plans table; the later copy wins.
func (a *app) findPlan(ctx context.Context, ref string) (*plans.Plan, string, error) {
	ps, closeFn := a.planStore(ctx)
	defer closeFn()
	p, path, err := planstore.Load(ctx, a.planDir(), ps, ref)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, planstore.ErrNotFound) {
			return nil, path, badInput("no plan %q (looked for %s and in the sharding database; see 'shardctl plan list')", ref, path)
		}
		return nil, path, withCode(ExitBadInput, err)
	}
	return p, path, nil
}

// listPlans lists the plan directory and the sharding database's plans.
func (a *app) listPlans(ctx context.Context) ([]plans.Entry, error) {
	ps, closeFn := a.planStore(ctx)
	defer closeFn()
	es, err := planstore.ListAll(ctx, a.planDir(), ps)
	if err != nil && es != nil {
		a.log.Warn("could not list the sharding database's plans", "err", err)
		err = nil
	}
	return es, err
}
