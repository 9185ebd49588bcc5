package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/shardctl/shardctl/pipeline/window"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
)

var discard = slog.New(slog.DiscardHandler)

// Finish completes a plan an operation built: it runs the preflight against
// the real servers (so a dry run refuses what a run would refuse, and nothing
// is changed) and records the statements the plan will run against the shard map.
func Finish(ctx context.Context, env Env, p *plans.Plan) error {
	r := &runner{env: env, p: p}
	defer r.close()
	if err := r.open(ctx); err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err) // at planning a server that cannot be reached is an input to fix
	}
	// Every check, so a dry run refuses what a run would, each problem at once.
	if err := r.planChecks(ctx); err != nil {
		return err
	}
	if err := planCounters(ctx, r.src, r.dst, p); err != nil {
		return err
	}
	for _, c := range p.Counters {
		if c.Warning != "" {
			env.Log.Warn(c.Warning)
		}
	}
	window.Setup(p)
	if err := readObjects(ctx, r.src, r.dst, p); err != nil {
		return err
	}
	if err := translateDefinitions(ctx, r.src, r.dst, p); err != nil {
		return err
	}
	p.SQLPreview = nil
	for _, g := range append([]window.PreviewStep{{Step: "create", Changes: p.Prepare}, {Step: "fence", Changes: p.Offline}, {Step: "cutover", Changes: p.Cutover},
		{Step: "cleanup", Changes: p.AfterCleanup}, {Step: "abort (only if aborted)", Changes: p.Abort}}, window.Preview(p)...) {
		if len(g.Changes) == 0 {
			continue
		}
		p.SQLPreview = append(p.SQLPreview, "-- "+g.Step+":")
		for _, c := range g.Changes {
			q, args := c.SQL(env.Store.Schema)
			if c.ShardID == shardmap.NewShard {
				q += " -- shard id assigned at create"
			}
			p.SQLPreview = append(p.SQLPreview, previewLine(shardmap.Render(q, args)+";"))
		}
		p.SQLPreview = append(p.SQLPreview, fmt.Sprintf("UPDATE `%s`.`version` SET version = version + 1 WHERE id = 1;", env.Store.Schema))
	}
	p.SQLPreview = append(p.SQLPreview, window.CompleteSQL(p)...)
	return nil
}

// Inspect reads the tables of a shard's schema and marks the sharded ones
// (listed in the shard map's columns table) with their sharding column.
// Filters are left empty (every row): planners restrict them.
func Inspect(ctx context.Context, env Env, m *shardmap.Map, loc shardmap.Location) ([]tables.Table, error) {
	db, release, err := env.open(ctx, loc.Addr())
	if err != nil {
		return nil, fmt.Errorf("%w: shard %d's server: %v", ErrRefused, loc.ShardID, err)
	}
	defer release()
	ts, err := tables.Inspect(ctx, db, loc.Schema)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("%w: shard %d's schema %s on %s has no tables", shardmap.ErrBadInput, loc.ShardID, loc.Schema, loc.Addr())
	}
	for i := range ts {
		_, col, ok := m.TableFunction(ts[i].Name)
		ts[i].Sharded = ok
		ts[i].ShardColumn = col.Column
	}
	return ts, nil
}

// Shard loads the shard map and the location of shard id, refusing an unknown
// shard as bad input; planners start here.
func Shard(ctx context.Context, env Env, id int) (*shardmap.Map, shardmap.Location, error) {
	m, err := env.Store.Load(ctx)
	if err != nil {
		return nil, shardmap.Location{}, err
	}
	loc, err := m.Location(id)
	if err != nil {
		return nil, loc, fmt.Errorf("%w: unknown shard %d (see 'shardctl shardmap show')", shardmap.ErrBadInput, id)
	}
	return m, loc, nil
}

// previewLine keeps a statement of the SQL preview short: a LIST merge's
// change names every key of the shard (50,000 of them made the preview 2 MB
// of every save of the plan); the plan's changes hold them all.
func previewLine(q string) string {
	const most = 500
	if len(q) <= most {
		return q
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(q[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d characters in all: the keys are in the plan's changes)", q[:cut], len(q))
}
