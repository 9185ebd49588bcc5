package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/operation"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
)

// A merge copies the merged shard's rows, ids included, into a target that
// keeps serving and issuing ids of its own. InnoDB moves a counter past
// every id written into its table, so when the merged shard's ids lie at or
// above the target's counter the copy drags the target's counter into the
// merged shard's id space: while the copy and the tail run, the target hands
// out ids the merged shard holds (not yet copied) or goes on issuing, and one
// side's row then refuses or replaces the other's. The counters carried at
// the cutover (autoinc.go) cannot help: the harm is done before it.
//
// So the plan raises the target's counter, at create and before the copy,
// to the merged shard's counter plus a margin: the merged shard keeps
// inserting until the cutover and its ids stay below the raise, the
// target's own ids above it. The margin is the merged shard's counter
// itself (as many ids again as it issued in its life), at least
// minCounterMargin, at most half the room the column's type leaves. Raising
// again later cannot help (the target issues from the first raise on), so
// ahead of each cutover attempt idsApart checks that the merged shard stayed
// below it. Shards made from one database (equal counters) merge so; servers
// that interleave ids (auto_increment_increment > 1, distinct offsets) need
// no raise.
const minCounterMargin = 1_000_000

// planCounters records the copied tables with an AUTO_INCREMENT counter
// and, for a merge, the raise of the target's counters. A column whose type
// leaves no room for a margin is refused.
func planCounters(ctx context.Context, src, dst *sql.DB, p *plans.Plan) error {
	cols, err := counterColumns(ctx, src, p.Source.Schema)
	if err != nil {
		return failure.ProbeError("the AUTO_INCREMENT columns", "source", p.Source.Addr(), err)
	}
	var names []string
	for _, t := range p.Copy {
		if _, ok := cols[t.Name]; ok {
			names = append(names, t.Name)
		}
	}
	from, err := autoIncrements(ctx, src, p.Source.Schema, names)
	if err != nil {
		return failure.ProbeError("the AUTO_INCREMENT counters", "source", p.Source.Addr(), err)
	}
	p.Counters = []plans.Counter{}
	for _, n := range names {
		c := cols[n]
		c.Source = from[n]
		p.Counters = append(p.Counters, c)
	}
	if !operation.Of(p.Operation).IntoExisting || len(names) == 0 {
		return nil
	}
	meet, err := idsCanMeet(ctx, src, p)
	if err != nil {
		return failure.ProbeError("the AUTO_INCREMENT columns and unique keys", "source", p.Source.Addr(), err)
	}
	if len(meet) == 0 {
		return nil
	}
	apart, err := interleaved(ctx, src, dst)
	if err != nil {
		return failure.ProbeError("auto_increment_increment and auto_increment_offset", "source and target", p.Source.Addr()+" / "+p.Target.Addr(), err)
	}
	if apart {
		return nil
	}
	into, err := autoIncrements(ctx, dst, p.Target.Schema, meet)
	if err != nil {
		return failure.ProbeError("the AUTO_INCREMENT counters", "target", p.Target.Addr(), err)
	}
	var bad []string
	for i := range p.Counters {
		c := &p.Counters[i]
		if !slices.Contains(meet, c.Table) {
			continue
		}
		c.Target = into[c.Table]
		to, margin, ok := counterRaise(c.Source, c.Max)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s.%s (counter %d, its type's largest value %d)", c.Table, c.Column, c.Source, c.Max))
			continue
		}
		if c.Target < to {
			c.RaiseTo, c.Margin = to, margin
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: the merge target's AUTO_INCREMENT counter must go above every id shard %d issues until the cutover, and these columns' types leave no room for that above the merged shard's counter: %s; widen the column (BIGINT) on both shards, then plan the merge again",
			ErrRefused, p.Source.ShardID, strings.Join(bad, "; "))
	}
	return nil
}

// counterRaise is where a merge target's counter goes for a merged shard's
// counter s in a column whose largest value is hi, and the margin that
// leaves the merged shard; ok is false when the type leaves no room.
func counterRaise(s, hi uint64) (to, margin uint64, ok bool) {
	if s >= hi {
		return 0, 0, false
	}
	margin = min(max(s, minCounterMargin), (hi-s)/2)
	return s + margin, margin, margin > 0
}

// raiseMergeCounters raises, at create, the merge target's counters the
// plan names, from the live counters (the plan may be applied long after it
// was made: the merged shard's counter moved, the margin stays), and
// records where they went.
func (r *runner) raiseMergeCounters(ctx context.Context) error {
	names, from, err := r.sourceCounters(ctx, func(c plans.Counter) bool { return c.RaiseTo > 0 && !c.Raised })
	if err != nil || len(names) == 0 {
		return err
	}
	into, err := autoIncrements(ctx, r.dst, r.p.Target.Schema, names)
	if err != nil {
		return err
	}
	to := map[string]uint64{}
	var raise []string
	r.mu.Lock()
	for i := range r.p.Counters {
		c := &r.p.Counters[i]
		if !slices.Contains(names, c.Table) {
			continue
		}
		s := from[c.Table]
		if s >= c.Max || c.Max-s < c.Margin {
			r.mu.Unlock()
			return fmt.Errorf("table %s.%s: the merged shard's AUTO_INCREMENT counter reached %d, too near its type's largest value %d to raise the target's %d above it", r.p.Target.Schema, c.Table, s, c.Max, c.Margin)
		}
		c.RaiseTo = max(c.RaiseTo, s+c.Margin)
		if into[c.Table] < c.RaiseTo {
			to[c.Table] = c.RaiseTo
			raise = append(raise, c.Table)
		}
	}
	r.mu.Unlock()
	if err := raiseCounters(ctx, r.dst, r.p.Target.Schema, raise, to, r.p.Options.LockWaitMS.D()); err != nil {
		return err
	}
	r.mu.Lock()
	for i := range r.p.Counters {
		if slices.Contains(names, r.p.Counters[i].Table) {
			r.p.Counters[i].Raised = true
		}
	}
	r.mu.Unlock()
	if len(raise) > 0 {
		r.env.Log.Info("merge target's AUTO_INCREMENT counters raised", "schema", r.p.Target.Schema, "tables", raise)
	}
	return r.save(true)
}

// sourceCounters reads the source's live counters of the plan's counters
// that keep says, and names them.
func (r *runner) sourceCounters(ctx context.Context, keep func(plans.Counter) bool) (names []string, from map[string]uint64, err error) {
	for _, c := range r.p.Counters {
		if keep(c) {
			names = append(names, c.Table)
		}
	}
	if len(names) == 0 {
		return nil, nil, nil
	}
	from, err = autoIncrements(ctx, r.src, r.p.Source.Schema, names)
	return names, from, err
}

// errIdsMet stops a merge whose merged shard issued ids up to the target's raised counter.
var errIdsMet = errors.New("the merged shard's AUTO_INCREMENT ids reached the target's")

// idsApart checks, ahead of a merge's cutover attempt, that the merged
// shard's counters stayed below where create raised the target's.
func (r *runner) idsApart(ctx context.Context) error {
	_, from, err := r.sourceCounters(ctx, func(c plans.Counter) bool { return c.Raised })
	if err != nil {
		return err
	}
	for _, c := range r.p.Counters {
		if s := from[c.Table]; c.Raised && s >= c.RaiseTo {
			return fmt.Errorf("%w: table %s.%s: shard %d's counter is %d, at or past the %d the target's was raised to at create, so ids from %d on may be on both shards; the cutover is stopped (plan abort removes the copied rows; look at the rows with ids from %d before merging again)",
				errIdsMet, r.p.Source.Schema, c.Table, r.p.Source.ShardID, s, c.RaiseTo, c.RaiseTo, c.RaiseTo)
		}
	}
	return nil
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
