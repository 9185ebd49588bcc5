package pipeline

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/pipeline/interlock"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/shardmap"
	"github.com/shardctl/shardctl/tables"
	"github.com/shardctl/shardctl/verify"
)

// Serving says which side of a plan the shard map points its rows to: the
// source until cutover, the target after it (or the side a reverse window
// switched back to). verify --repair writes only the other side.
func Serving(p *plans.Plan) string {
	switch {
	case p.Window != nil && p.CutOver():
		return p.Window.Serving
	case p.CutOver():
		return plans.SideTarget
	}
	return plans.SideSource
}

// CheckServing refuses (ErrRefused) a repair from `serving` (the side a
// plan says serves) unless the shard map locates that side's shard there:
// the map, not the plan file, decides which copy is the source.
func CheckServing(m *shardmap.Map, serving plans.Endpoint) error {
	l, err := m.Location(serving.ShardID)
	if err != nil || !interlock.SameEndpoint(l, serving) {
		return fmt.Errorf("%w: the shard map does not locate shard %d at %s/%s, the side the plan says serves: --repair needs the map and the plan to agree on which copy is the source (see 'shardctl shardmap show')",
			ErrRefused, serving.ShardID, serving.Addr(), serving.Schema)
	}
	return nil
}

// CheckRepairable refuses (ErrLive) to repair `at` when the shard map
// locates a shard there: a shard's schema is served, never overwritten from
// another copy.
func CheckRepairable(m *shardmap.Map, at plans.Endpoint) error {
	for _, l := range m.Locations {
		if interlock.SameEndpoint(l, at) {
			return fmt.Errorf("%w: %s/%s is shard %d's location; --repair writes only to a copy no shard is located at", ErrLive, at.Addr(), at.Schema, l.ShardID)
		}
	}
	return nil
}

// Repair makes v.Target's rows match v.Source's in the chunks res found
// differing, then verifies the tables again. The triggers of the repaired
// tables on the target that are not guarded already are guarded for the
// duration (the application's triggers must not fire on shardctl's writes)
// and put back exactly as they were; triggers an operation guarded stay
// guarded.
func Repair(ctx context.Context, v *verify.Verifier, ts []tables.Table, res verify.Result) (done verify.Repaired, again verify.Result, err error) {
	differ := map[string][]verify.Chunk{}
	var touched []tables.Table
	for _, c := range res.Mismatches {
		if differ[c.Table] == nil {
			if t, ok := tables.Find(ts, c.Table); ok {
				touched = append(touched, t)
			}
		}
		differ[c.Table] = append(differ[c.Table], c)
	}
	restore, err := guardTriggers(ctx, v.Target, v.TargetSchema, touched, true)
	if err != nil {
		return done, again, err
	}
	defer func() {
		if rerr := restore(context.WithoutCancel(ctx)); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for _, t := range touched {
		r, err := v.Repair(ctx, t, differ[t.Name])
		done.Written += r.Written
		done.Deleted += r.Deleted
		if err != nil {
			return done, again, err
		}
	}
	again, err = v.All(ctx, touched)
	return done, again, err
}

// guardedTriggers names schema's triggers whose body begins with the
// guard (see objdef.Object.Guarded).
func guardedTriggers(ctx context.Context, db *sql.DB, schema string) (map[string]bool, error) {
	guarded := map[string]bool{}
	var name string
	err := dbutil.ScanEach(ctx, db, `SELECT TRIGGER_NAME FROM information_schema.TRIGGERS
		WHERE TRIGGER_SCHEMA = ? AND ACTION_STATEMENT LIKE ?`, []any{schema, "%IF " + schemaobj.SkipVar + " IS NULL THEN%"},
		[]any{&name}, func() error { guarded[name] = true; return nil })
	return guarded, err
}
