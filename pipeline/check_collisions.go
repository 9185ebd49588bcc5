package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/tables"
)

// A merge copies rows into a schema that has rows of its own: a row whose
// primary or unique key T already has would be overwritten by the upsert.
// Scanned at planning, apply and resume until the copy starts (after that,
// T holds the copied rows themselves).
func init() {
	register(Check{
		Name:  "merge key collisions",
		Ops:   []string{"merge"},
		Until: plans.StepCopy,
		Run:   func(ctx context.Context, c *CheckEnv) error { return collisions(ctx, c.Src, c.Dst, c.Plan) },
	})
}

// collisions refuses the merge when a row to copy would collide with a row T
// already has on its primary key or any unique key (vitess #14296): the upsert
// would silently overwrite T's row.
func collisions(ctx context.Context, sdb, tdb *sql.DB, p *plans.Plan) error {
	var found []string
	for _, t := range p.Copy {
		keys, err := uniqueKeys(ctx, tdb, p.Target.Schema, t.Name)
		if err != nil {
			return err
		}
		if keys == nil {
			return fmt.Errorf("%w: shard %d's schema %s has no table %s; the shards' schemas differ", ErrRefused, p.Target.ShardID, p.Target.Schema, t.Name)
		}
		for name, cols := range keys {
			sample, err := overlap(ctx, sdb, tdb, p, t, cols)
			if err != nil {
				return err
			}
			if len(sample) > 0 {
				found = append(found, fmt.Sprintf("%s key %s (%s): %s", t.Name, name, strings.Join(cols, ","), strings.Join(sample, "; ")))
			}
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("%w: rows of shard %d collide with rows shard %d already has, sample keys: %s; remove or re-key them first (a leftover range can be cleaned with 'shardctl prune')",
			ErrRefused, p.Source.ShardID, p.Target.ShardID, strings.Join(found, " | "))
	}
	return nil
}

// uniqueKeys returns the primary and unique keys of a table (nil if the table does not exist).
func uniqueKeys(ctx context.Context, db *sql.DB, schema, table string) (map[string][]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX", schema, table)
	if err != nil {
		return nil, fmt.Errorf("merge preflight: keys of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var out map[string][]string
	for rows.Next() {
		var idx, col string
		if err := rows.Scan(&idx, &col); err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[idx] = append(out[idx], col)
	}
	if out == nil {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, table).Scan(&n); err == nil && n > 0 {
			out = map[string][]string{}
		}
	}
	return out, rows.Err()
}

// overlap streams the key values of the rows to copy and looks them up in T, a batch at a time.
func overlap(ctx context.Context, sdb, tdb *sql.DB, p *plans.Plan, t tables.Table, cols []string) ([]string, error) {
	where, args := t.Filter.SQL(dbutil.QuoteIdent)
	rows, err := sdb.QueryContext(ctx, "SELECT "+dbutil.QuoteIdents(cols)+" FROM "+dbutil.Table(p.Source.Schema, t.Name)+" WHERE "+where, args...)
	if dbutil.IsMissingFunction(err) && len(t.Filter.Arcs) > 0 {
		return nil, fmt.Errorf("%w: the source %s cannot compute the hash ranges (%v)%s", ErrRefused, p.Source.Addr(), err, classicHashingHint)
	}
	if err != nil {
		return nil, fmt.Errorf("merge preflight: read %s.%s: %w", p.Source.Schema, t.Name, err)
	}
	defer rows.Close()
	var sample []string
	var batch []any
	n := 0
	tuple := "(" + dbutil.Placeholders(len(cols)) + ")"
	flush := func() error {
		if n == 0 {
			return nil
		}
		q := "SELECT CONCAT_WS(',', " + dbutil.QuoteIdents(cols) + ") FROM " + dbutil.Table(p.Target.Schema, t.Name) +
			" WHERE (" + dbutil.QuoteIdents(cols) + ") IN (" + strings.TrimSuffix(strings.Repeat(tuple+",", n), ",") + ") LIMIT 5"
		r, err := tdb.QueryContext(ctx, q, batch...)
		if err != nil {
			return fmt.Errorf("merge preflight: look up %s.%s: %w", p.Target.Schema, t.Name, err)
		}
		defer r.Close()
		for r.Next() && len(sample) < 5 {
			var s sql.NullString
			if err := r.Scan(&s); err != nil {
				return err
			}
			sample = append(sample, s.String)
		}
		batch, n = batch[:0], 0
		return r.Err()
	}
	for rows.Next() && len(sample) < 5 {
		vals, ptrs := dbutil.Dest[any](len(cols))
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		batch = append(batch, vals...)
		n++
		if n == 500 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return sample, flush()
}
