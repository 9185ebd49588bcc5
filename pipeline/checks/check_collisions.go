package checks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shardctl/shardctl/binlog"
	"github.com/shardctl/shardctl/chunk"
	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/planstore"
	"github.com/shardctl/shardctl/tables"
)

// A merge copies rows into a schema that has rows of its own: a row whose
// primary or unique key T already has would be overwritten by the upsert.
// Scanned at planning, and at apply and resume until the copy starts (after
// that, T holds the copied rows themselves) unless neither server has
// written anything since the last scan.
func init() {
	register(Check{
		Name:  "merge key collisions",
		Only:  func(o operation.Op) bool { return o.IntoExisting },
		Until: plans.StepCopy,
		Run: func(ctx context.Context, c *CheckEnv) error {
			err := collisions(ctx, c.Src, c.Dst, c.Plan)
			if errors.As(err, new(collision)) {
				if w := openWindowBetween(ctx, c); w != nil {
					// The rows are the window's in-sync copy, not strays: the
					// way out is the window's, never a delete (issue 53).
					return fmt.Errorf("%w: the rows of these keys on shard %d are plan %s's in-sync copy, kept by its open reverse window (%s; the %s serves): end the window first, switching back with 'shardctl plan revert %s' or finishing with 'shardctl plan complete %s'",
						failure.ErrRefused, c.Plan.Target.ShardID, w.ID, w.Summary, w.Window.Serving, w.ID, w.ID)
				}
			}
			return err
		},
	})
}

// collision is the refusal for rows both shards hold.
type collision struct{ error }

func (c collision) Unwrap() error { return c.error }

// openWindowBetween is an unfinished plan inside its reverse window between
// the plan's two shards (either way), or nil: its other copy is what a move
// of its keys back finds on the receiving shard.
func openWindowBetween(ctx context.Context, c *CheckEnv) *plans.Plan {
	if c.Store == nil {
		return nil
	}
	others, err := planstore.New(c.Store.DB, c.Store.Schema).Unfinished(ctx)
	if err != nil {
		return nil // the collision refusal stands on its own
	}
	a, b := c.Plan.Source.ShardID, c.Plan.Target.ShardID
	for _, o := range others {
		s, t := o.Source.ShardID, o.Target.ShardID
		if o.ID != c.Plan.ID && o.InWindow() && (s == a && t == b || s == b && t == a) {
			return o
		}
	}
	return nil
}

// collisionChunk is how many of the source's keys one step of the scan holds.
const collisionChunk = 20000

// collisions refuses the merge when a row to copy would collide with a row T
// already has on its primary key or any unique key (vitess #14296): the upsert
// would silently overwrite T's row. A key that carries the table's shard
// column is skipped unless T holds a row in the merged range: the rows of
// two shards never share a shard key. The others are scanned in key order on both servers (sequential index reads,
// one chunk of the source's keys in memory at a time).
func collisions(ctx context.Context, sdb, tdb *sql.DB, p *plans.Plan) error {
	spos, serr := binlog.MasterStatus(ctx, sdb)
	tpos, terr := binlog.MasterStatus(ctx, tdb)
	fresh := serr == nil && terr == nil
	if c := p.Collisions; c != nil && (c.Here || fresh && c.Source == spos.String() && c.Target == tpos.String()) {
		return nil // scanned by this process, or neither server has written a row since
	}
	scan := &plans.CollisionScan{At: time.Now().UTC(), Here: true}
	if fresh {
		scan.Source, scan.Target = spos.String(), tpos.String()
	}
	var found []string
	for _, t := range p.Copy {
		keys, err := uniqueKeys(ctx, tdb, p.Target.Schema, t.Name)
		if err != nil {
			return err
		}
		if keys == nil {
			return fmt.Errorf("%w: shard %d's schema %s has no table %s; the shards' schemas differ", failure.ErrRefused, p.Target.ShardID, p.Target.Schema, t.Name)
		}
		names := make([]string, 0, len(keys))
		for name := range keys {
			names = append(names, name)
		}
		sort.Strings(names)
		// A row of T can share a key carrying the shard column with a row
		// to copy only if its shard key is in the merged range, which a
		// shard's rows are not, unless T keeps a stray row there: one probe
		// tells, and only then are those keys scanned too.
		strays, err := rowsInRange(ctx, tdb, p, t)
		if err != nil {
			return err
		}
		for _, name := range names {
			cols := keys[name]
			label := fmt.Sprintf("%s.%s (%s)", t.Name, name, strings.Join(cols, ","))
			if t.Sharded && slices.Contains(cols, t.ShardColumn) && !strays {
				scan.Skipped = append(scan.Skipped, label)
				continue
			}
			sample, err := overlap(ctx, sdb, tdb, p, t, name, cols)
			if err != nil {
				return err
			}
			scan.Scanned = append(scan.Scanned, label)
			if len(sample) > 0 {
				found = append(found, fmt.Sprintf("%s key %s (%s): %s", t.Name, name, strings.Join(cols, ","), strings.Join(sample, "; ")))
			}
		}
	}
	if len(found) > 0 {
		return collision{fmt.Errorf("%w: rows of shard %d collide with rows shard %d already has, sample keys: %s; remove or re-key them first (rows shard %d keeps outside its keys, a leftover, are removed by 'shardctl prune --shard %d')",
			failure.ErrRefused, p.Source.ShardID, p.Target.ShardID, strings.Join(found, " | "), p.Target.ShardID, p.Target.ShardID)}
	}
	p.Collisions = scan
	return nil
}

// rowsInRange reports whether T's table holds a row in the range the merge
// copies (a stray a prune never removed).
func rowsInRange(ctx context.Context, tdb *sql.DB, p *plans.Plan, t tables.Table) (bool, error) {
	if !t.Sharded || t.Filter.All() {
		return true, nil
	}
	where, args := t.Filter.SQL(dbutil.QuoteIdent)
	var one int
	err := tdb.QueryRowContext(ctx, "SELECT 1 FROM "+dbutil.Table(p.Target.Schema, t.Name)+" WHERE "+where+" LIMIT 1", args...).Scan(&one)
	switch {
	case err == sql.ErrNoRows:
		return false, nil
	case dbutil.IsMissingFunction(err) && len(t.Filter.Arcs) > 0:
		return false, fmt.Errorf("%w: the target %s cannot compute the hash ranges (%v)%s", failure.ErrRefused, p.Target.Addr(), err, failure.ClassicHashingHint)
	case err != nil:
		return false, fmt.Errorf("merge preflight: look for rows of %s.%s in the merged range: %w", p.Target.Schema, t.Name, err)
	}
	return true, nil
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

// overlap walks the source's rows to copy in the order of unique key idx, a
// chunk of keys at a time, and reads the target's keys in the same range of
// the same index: at most up to 5 keys both hold. Keys are compared as the
// index does: character columns by their collation's weights, with trailing
// spaces dropped (PAD SPACE collations ignore them; under a NO PAD one this
// can only report a collision too many, never miss one); rows with a NULL in
// the key never collide.
func overlap(ctx context.Context, sdb, tdb *sql.DB, p *plans.Plan, t tables.Table, idx string, cols []string) ([]string, error) {
	typed, err := chunk.Probe(ctx, sdb, p.Source.Schema, t.Name, cols)
	if err != nil {
		return nil, err
	}
	key, err := chunk.NewKey(p.Source.Schema, t.Name, idx, typed)
	if err != nil {
		return nil, fmt.Errorf("%w: merge preflight: %v; the scan for rows both shards hold cannot walk unique key %s", failure.ErrRefused, err, idx)
	}
	same := make([]string, len(typed))
	notNull := make([]string, len(typed))
	for i, c := range typed {
		same[i] = c.Expr()
		if c.Kind == chunk.Char {
			same[i] = "HEX(WEIGHT_STRING(TRIM(TRAILING ' ' FROM " + dbutil.QuoteIdent(c.Name) + ")))"
		}
		notNull[i] = dbutil.QuoteIdent(c.Name) + " IS NOT NULL"
	}
	filter, filterArgs := t.Filter.SQL(dbutil.QuoteIdent)
	from := func(schema string) string {
		return " FROM " + dbutil.Table(schema, t.Name) + " FORCE INDEX (" + dbutil.QuoteIdent(idx) + ") WHERE " + strings.Join(notNull, " AND ")
	}
	read := func(db *sql.DB, q string, args []any, each func(raw [][]byte) error) error {
		rows, err := db.QueryContext(ctx, q, args...)
		if dbutil.IsMissingFunction(err) && len(t.Filter.Arcs) > 0 {
			return fmt.Errorf("%w: the source %s cannot compute the hash ranges (%v)%s", failure.ErrRefused, p.Source.Addr(), err, failure.ClassicHashingHint)
		}
		if err != nil {
			return fmt.Errorf("merge preflight: scan %s.%s by key %s: %w", p.Source.Schema, t.Name, idx, err)
		}
		defer rows.Close()
		n := 2 * len(typed)
		for rows.Next() {
			raw, dest := dbutil.Dest[sql.RawBytes](n)
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			vals := make([][]byte, n)
			for i, r := range raw {
				vals[i] = r
			}
			if err := each(vals); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	var sample []string
	var after []string
	for len(sample) < 5 {
		rng, rngArgs, err := key.Range(after, nil)
		if err != nil {
			return nil, err
		}
		theirs := map[string]bool{}
		var first, last []string
		n := 0
		err = read(sdb, "SELECT "+key.Select()+", "+strings.Join(same, ", ")+from(p.Source.Schema)+" AND "+filter+" AND "+rng+
			" ORDER BY "+key.OrderBy()+" LIMIT ?", append(append(slices.Clone(filterArgs), rngArgs...), collisionChunk),
			func(raw [][]byte) error {
				last = key.Text(raw[:len(typed)])
				if first == nil {
					first = last
				}
				theirs[weights(raw[len(typed):])] = true
				n++
				return nil
			})
		if err != nil || n == 0 {
			return sample, err
		}
		lo, loArgs, err := key.Compare(">=", first)
		if err != nil {
			return nil, err
		}
		hi, hiArgs, err := key.Compare("<=", last)
		if err != nil {
			return nil, err
		}
		err = read(tdb, "SELECT "+key.Select()+", "+strings.Join(same, ", ")+from(p.Target.Schema)+" AND "+lo+" AND "+hi,
			append(loArgs, hiArgs...), func(raw [][]byte) error {
				if len(sample) < 5 && theirs[weights(raw[len(typed):])] {
					sample = append(sample, strings.Join(key.Text(raw[:len(typed)]), ","))
				}
				return nil
			})
		if err != nil || n < collisionChunk {
			return sample, err
		}
		after = last
	}
	return sample, nil
}

// weights joins a key's comparison forms into one map key.
func weights(raw [][]byte) string {
	var b strings.Builder
	for _, r := range raw {
		fmt.Fprintf(&b, "%d:%s|", len(r), r)
	}
	return b.String()
}
