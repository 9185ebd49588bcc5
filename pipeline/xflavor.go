package pipeline

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/snapshot"
	"github.com/shardctl/shardctl/xflavor"
)

// translateDefinitions runs at planning, after readObjects, for a target of
// the other flavor: every copied table's definition and the source schema's
// default collation are translated as create will translate them, the
// objects the target gets are replaced by their translations, and what
// changes is recorded in the plan (the dry run lists it). A definition the
// target cannot take refuses the plan, naming the table, column or object.
func translateDefinitions(ctx context.Context, src, dst *sql.DB, p *plans.Plan) error {
	p.Translations = nil
	rules, err := snapshot.Rules(ctx, src, dst)
	if err != nil {
		return fmt.Errorf("plan %s: %w", p.Summary, err)
	}
	if rules.Dir == xflavor.Same {
		return nil
	}
	var res xflavor.Result
	if p.DropTargetSchema { // a new target schema
		var coll string
		if err := src.QueryRowContext(ctx, "SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", p.Source.Schema).Scan(&coll); err != nil {
			return fmt.Errorf("read schema %s on the source %s: %w", p.Source.Schema, p.Source.Addr(), err)
		}
		_, r := rules.Schema(p.Source.Schema, coll)
		res.Add(r)
	}
	for _, t := range p.Copy {
		var name, ddl string
		if err := src.QueryRowContext(ctx, "SHOW CREATE TABLE "+dbutil.Table(p.Source.Schema, t.Name)).Scan(&name, &ddl); err != nil {
			return fmt.Errorf("read the definition of %s.%s on the source %s: %w", p.Source.Schema, t.Name, p.Source.Addr(), err)
		}
		_, r := rules.Table(t.Name, ddl)
		res.Add(r)
	}
	for i, o := range p.Objects {
		if o.OnTarget {
			continue
		}
		var r xflavor.Result
		p.Objects[i], r = rules.Object(o)
		res.Add(r)
	}
	p.Translations = res.Translations
	if err := res.Err(); err != nil {
		return fmt.Errorf("%w: schema %s on %s, moving to %s: %w", ErrRefused, p.Source.Schema, p.Source.Addr(), p.Target.Addr(), err)
	}
	return nil
}
