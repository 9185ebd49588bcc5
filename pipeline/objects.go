package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/shardctl/shardctl/fence"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/schemaobj"
	"github.com/shardctl/shardctl/tables"
)

// readObjects records, at planning (before anything changes), the source's
// views, triggers, routines and events, which of them a merge target has
// already, and the triggers shardctl guards for the duration: the target's
// on the tables copied into it (merge) and the source's on the tables
// cleanup deletes from. Recording the originals first is what lets a crash
// at any point be followed by an exact restore.
func readObjects(ctx context.Context, src, dst *sql.DB, p *plans.Plan) error {
	objs, err := schemaobj.Read(ctx, src, p.Source.Schema, fence.TriggerPrefix)
	if err != nil {
		return err
	}
	merge := !p.DropTargetSchema
	for i := range objs {
		if merge {
			if objs[i].OnTarget, err = schemaobj.Exists(ctx, dst, p.Target.Schema, objs[i]); err != nil {
				return err
			}
		}
	}
	p.Objects = objs
	if missing := schemaobj.MissingDefiners(ctx, dst, carried(p)); len(missing) > 0 {
		return fmt.Errorf("%w: the views, triggers, routines or events of %s run as %s, which has no account on the target %s: create the account there (CREATE USER ...; with the same grants) or change the objects' DEFINER",
			ErrRefused, p.Source.Schema, strings.Join(missing, ", "), p.Target.Addr())
	}
	p.TargetTriggers = nil
	if merge {
		if p.TargetTriggers, err = triggersOn(ctx, dst, p.Target.Schema, p.Copy); err != nil {
			return err
		}
	}
	p.SourceTriggers = nil
	if !p.KeepSource {
		if p.SourceTriggers, err = triggersOn(ctx, src, p.Source.Schema, p.Cleanup); err != nil {
			return err
		}
	}
	return nil
}

func triggersOn(ctx context.Context, db *sql.DB, schema string, ts []tables.Table) ([]schemaobj.Object, error) {
	all, err := schemaobj.Read(ctx, db, schema, fence.TriggerPrefix)
	if err != nil {
		return nil, err
	}
	on := map[string]bool{}
	for _, t := range ts {
		on[t.Name] = true
	}
	var out []schemaobj.Object
	for _, o := range all {
		if o.Kind == schemaobj.Trigger && on[o.Table] {
			out = append(out, o)
		}
	}
	return out, nil
}

// carried are the source objects the target gets (not those a merge target has).
func carried(p *plans.Plan) []schemaobj.Object {
	var out []schemaobj.Object
	for _, o := range p.Objects {
		if !o.OnTarget {
			out = append(out, o)
		}
	}
	return out
}

// createObjects runs at create: a merge target's triggers on the copied
// tables become guarded, and the source's objects are created on the target
// (triggers guarded, events disabled).
func (r *runner) createObjects(ctx context.Context) error {
	if err := schemaobj.Replace(ctx, r.dst, r.p.Target.Schema, r.p.Target.Schema, r.p.TargetTriggers, true); err != nil {
		return fmt.Errorf("guard the target's triggers: %w", err)
	}
	did, err := schemaobj.Create(ctx, r.dst, r.p.Target.Schema, r.p.Source.Schema, carried(r.p))
	for _, d := range did {
		r.env.Log.Info("schema object", "target", r.p.Target.Schema, "object", d)
	}
	return err
}

// finishObjects runs right after cutover: the target's triggers get their
// exact definitions back (the guarded ones behave the same for the
// application, so a crash before this is harmless and a resume repeats it),
// and events enabled on the source are enabled on the target.
func (r *runner) finishObjects(ctx context.Context) error {
	if err := schemaobj.Finish(ctx, r.dst, r.p.Target.Schema, r.p.Source.Schema, carried(r.p)); err != nil {
		return err
	}
	return restoreTargetTriggers(ctx, r.dst, r.p)
}

func restoreTargetTriggers(ctx context.Context, dst *sql.DB, p *plans.Plan) error {
	if err := schemaobj.Replace(ctx, dst, p.Target.Schema, p.Target.Schema, p.TargetTriggers, false); err != nil {
		return fmt.Errorf("restore the target's triggers: %w", err)
	}
	return nil
}

// GuardTriggers swaps the triggers of ts in schema for guarded versions and
// returns the function that puts the originals back (shardctl prune).
func GuardTriggers(ctx context.Context, db *sql.DB, schema string, ts []tables.Table) (func(context.Context) error, error) {
	return guardTriggers(ctx, db, schema, ts, false)
}

// guardTriggers is GuardTriggers; with keep, triggers guarded already (an
// operation's copy) are left out, so the restore leaves them guarded.
func guardTriggers(ctx context.Context, db *sql.DB, schema string, ts []tables.Table, keep bool) (func(context.Context) error, error) {
	trig, err := triggersOn(ctx, db, schema, ts)
	if err != nil {
		return nil, err
	}
	if keep {
		guarded, err := guardedTriggers(ctx, db, schema)
		if err != nil {
			return nil, fmt.Errorf("read the triggers of %s: %w", schema, err)
		}
		trig = slices.DeleteFunc(trig, func(o schemaobj.Object) bool { return guarded[o.Name] })
	}
	if err := schemaobj.Replace(ctx, db, schema, schema, trig, true); err != nil {
		return nil, fmt.Errorf("guard the triggers of %s: %w", schema, err)
	}
	return func(ctx context.Context) error {
		if err := schemaobj.Replace(ctx, db, schema, schema, trig, false); err != nil {
			return fmt.Errorf("restore the triggers of %s: %w", schema, err)
		}
		return nil
	}, nil
}
