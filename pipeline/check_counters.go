package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/plans"
)

// A merge copies the merged shard's rows, ids included, into a target that
// keeps serving and issuing ids of its own. InnoDB moves a counter past
// every id written into its table, so when the merged shard's ids lie at or
// above the target's counter the copy drags the target's counter into the
// merged shard's id space: while the copy and the tail run, the target hands
// out ids the merged shard holds (not yet copied) or goes on issuing, and one
// side's row then refuses or replaces the other's. Seen in CI as a duplicate
// key on the target's own insert, mid-copy. The counters carried at the
// cutover (autoinc.go) cannot help: the harm is done before it. The merge is
// safe when every id the merged shard holds or issues stays below the
// target's counter, or when the servers interleave ids
// (auto_increment_increment > 1 with distinct offsets).
func init() {
	register(Check{
		Name:  "merge counters apart",
		Only:  func(o operation.Op) bool { return o.IntoExisting },
		Until: plans.StepCopy,
		Run: func(ctx context.Context, c *CheckEnv) error {
			p := c.Plan
			names, err := idsCanMeet(ctx, c.Src, p)
			if err != nil {
				return probeError("the AUTO_INCREMENT columns and unique keys", "source", p.Source.Addr(), err)
			}
			if len(names) == 0 {
				return nil
			}
			apart, err := interleaved(ctx, c.Src, c.Dst)
			if err != nil {
				return probeError("auto_increment_increment and auto_increment_offset", "source and target", p.Source.Addr()+" / "+p.Target.Addr(), err)
			}
			if apart {
				return nil
			}
			from, err := autoIncrements(ctx, c.Src, p.Source.Schema, names)
			if err != nil {
				return probeError("the AUTO_INCREMENT counters", "source", p.Source.Addr(), err)
			}
			if len(from) == 0 {
				return nil
			}
			into, err := autoIncrements(ctx, c.Dst, p.Target.Schema, names)
			if err != nil {
				return probeError("the AUTO_INCREMENT counters", "target", p.Target.Addr(), err)
			}
			var bad []string
			for _, n := range names {
				s, ok := from[n]
				t, tok := into[n]
				if !ok || !tok || s < t {
					continue
				}
				bad = append(bad, fmt.Sprintf("%s (the merged shard's counter %d, the target's %d: raise it with ALTER TABLE %s AUTO_INCREMENT = N, N above every id shard %d issues until the cutover, e.g. %d)",
					n, s, t, dbutil.Table(p.Target.Schema, n), p.Source.ShardID, 2*s))
			}
			if len(bad) == 0 {
				return nil
			}
			return fmt.Errorf("%w: the merge target's AUTO_INCREMENT counter is not above the merged shard's, so while the copy runs the target would issue ids the merged shard holds or issues (one side's row would refuse or replace the other's): %s; or merge shard %d into shard %d instead",
				ErrRefused, strings.Join(bad, "; "), p.Target.ShardID, p.Source.ShardID)
		},
	})
}

// idsCanMeet lists the copied tables where the two shards' issued ids can
// meet: an AUTO_INCREMENT column in a unique key without the shard column
// (a key that has the shard column never holds two shards' rows alike, so
// their ids may repeat: (emp_no, seq) keys of a per-employee counter).
func idsCanMeet(ctx context.Context, db *sql.DB, p *plans.Plan) ([]string, error) {
	auto := map[string]string{} // table: its AUTO_INCREMENT column
	var tb, col, idx string
	if err := dbutil.ScanEach(ctx, db, "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND EXTRA LIKE '%auto_increment%'",
		[]any{p.Source.Schema}, []any{&tb, &col}, func() error { auto[tb] = col; return nil }); err != nil {
		return nil, err
	}
	if len(auto) == 0 {
		return nil, nil
	}
	keys := map[string]map[string][]string{} // table: unique key: columns
	if err := dbutil.ScanEach(ctx, db, "SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND NON_UNIQUE = 0",
		[]any{p.Source.Schema}, []any{&tb, &idx, &col}, func() error {
			if keys[tb] == nil {
				keys[tb] = map[string][]string{}
			}
			keys[tb][idx] = append(keys[tb][idx], col)
			return nil
		}); err != nil {
		return nil, err
	}
	var out []string
	for _, t := range p.Copy {
		a, ok := auto[t.Name]
		if !ok {
			continue
		}
		for _, cols := range keys[t.Name] {
			if slices.ContainsFunc(cols, func(c string) bool { return strings.EqualFold(c, a) }) &&
				(t.ShardColumn == "" || !slices.ContainsFunc(cols, func(c string) bool { return strings.EqualFold(c, t.ShardColumn) })) {
				out = append(out, t.Name)
				break
			}
		}
	}
	return out, nil
}

// interleaved reports whether the two servers issue ids from disjoint
// residue classes (the same auto_increment_increment above 1, different
// offsets), the usual way to keep shards' ids apart.
func interleaved(ctx context.Context, src, dst *sql.DB) (bool, error) {
	read := func(db *sql.DB) (inc, off uint64, err error) {
		err = db.QueryRowContext(ctx, "SELECT @@GLOBAL.auto_increment_increment, @@GLOBAL.auto_increment_offset").Scan(&inc, &off)
		return inc, off, err
	}
	si, so, err := read(src)
	if err != nil {
		return false, err
	}
	ti, to, err := read(dst)
	if err != nil {
		return false, err
	}
	return si > 1 && si == ti && so%si != to%ti, nil
}
